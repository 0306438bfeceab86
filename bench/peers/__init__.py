"""The durable peers bench/agents.py measures the platform against: the same 3-round run
(calculator, calculator, "done") against the same fake provider, with every step persisted
in the same embedded PostgreSQL, each peer in a database of its own:

- openai-agents with a SQLAlchemy session on asyncpg (openai_agents_sqlalchemy.py);
- openai-agents with DBOS, through `dbos-openai-agents` (openai_agents_dbos.py);
- pydantic-ai with DBOS, `pydantic_ai.durable_exec.dbos` (pydantic_ai_dbos.py);
- and for reference the bare loop again in the peers' venv and process (bare.py).

Each is a script run by .venv-peers/bin/python (`make py-peers`, from requirements.txt
here: openai-agents' `agents` package would shadow this project's app), one process per
peer for the whole benchmark, driven over its stdin and stdout (harness.py has the
protocol). The parent scripts the fake server before each run, as for its own sides; the
child times the run alone and answers its wall time, so the pipe is outside the figure.
The child's stderr goes to <log_dir>/peer-<script>.log, quoted when it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PYTHON = ROOT / ".venv-peers" / "bin" / "python"
START_TIMEOUT_S = 120.0  # imports, DBOS's migrations of its system database
RUN_TIMEOUT_S = 30.0

BARE_PEER = "bare loop, peers' venv"
PEERS = {  # side -> script
    BARE_PEER: "bare.py",
    "openai-agents + SQLAlchemy session": "openai_agents_sqlalchemy.py",
    "openai-agents + DBOS": "openai_agents_dbos.py",
    "pydantic-ai + DBOS": "pydantic_ai_dbos.py",
}
DURABLE_PEERS = tuple(side for side in PEERS if side != BARE_PEER)


class PeerProcess:
    """One peer's process; `config` is harness.Config's fields."""

    def __init__(self, side: str, script: str, config: dict[str, Any], log: Path) -> None:
        self.side, self.script, self.log = side, script, log
        self.versions: dict[str, str] = {}
        self._log_file = log.open("wb")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.process = subprocess.Popen(
            [str(PYTHON), str(HERE / script)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._send(config)

    def wait_ready(self) -> None:
        self.versions = self._receive(START_TIMEOUT_S)["ready"]

    def run(self) -> float:
        """One run; its wall time in seconds, as the child measured it."""
        self._send("run")
        return self._receive(RUN_TIMEOUT_S)["ms"] / 1000

    def _send(self, document: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(document) + "\n")
        self.process.stdin.flush()

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            reason = f"no answer in {timeout_s:g} s" if not ready else "it exited"
            raise RuntimeError(f"peer {self.side!r}: {reason}; its log:\n{self.tail()}")
        document = json.loads(line)
        if "error" in document:
            raise RuntimeError(f"peer {self.side!r} failed:\n{document['error']}")
        return document

    def tail(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self._send("stop")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(20)
        with contextlib.suppress(ProcessLookupError):  # and whatever it started
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close() if stream else None
        self._log_file.close()


class Peers:
    """Every peer's process, started at once and ready on return.

    `script_run` scripts the fake server for one run (the parent's RemoteServer);
    `database_url` is the owner's DATABASE_URL (`serve.child_env`), whose user and socket
    directory the peers connect with; `run` holds harness.Config's fields for the run itself
    (base_url, model, system, tools, input, answer, rounds, max_tokens)."""

    def __init__(
        self,
        *,
        script_run: Callable[[], None],
        database_url: str,
        log_dir: Path,
        **run: Any,
    ) -> None:
        if not PYTHON.exists():
            raise RuntimeError(f"{PYTHON.relative_to(ROOT)} is missing: `make py-peers` makes it")
        self._script_run = script_run
        parts = urlsplit(database_url)
        user, _, host = parts.netloc.rpartition("@")
        self.processes: list[PeerProcess] = []
        try:
            for side, script in PEERS.items():
                name = "bench_peer_" + script.removesuffix(".py")
                config = {**run, "db_user": user, "db_socket_dir": unquote(host), "db_name": name}
                log = log_dir / f"peer-{script.removesuffix('.py')}.log"
                self.processes.append(PeerProcess(side, script, config, log))
            for process in self.processes:
                process.wait_ready()
        except BaseException:
            self.close()
            raise

    def all(self) -> list[Callable[[], dict[str, float]]]:
        """One run of each peer, in the shape of bench/agents.py's Sides.all()."""

        def runner(process: PeerProcess) -> Callable[[], dict[str, float]]:
            def run() -> dict[str, float]:
                self._script_run()
                return {process.side: process.run()}

            return run

        return [runner(process) for process in self.processes]

    def describe(self) -> dict[str, Any]:
        return {p.side: {"script": f"bench/peers/{p.script}", **p.versions} for p in self.processes}

    def close(self) -> None:
        for process in self.processes:
            process.stop()
