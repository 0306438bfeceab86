"""What the benchmarks share: Django on a temporary DATA_DIR with the embedded services,
and child processes (uvicorn, Celery workers) started the way `manage.py serve` starts
them."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def configure_django(prefix: str) -> Path:
    """Settings on a fresh temporary DATA_DIR (the embedded PostgreSQL and Redis start
    there), migrated; the directory is removed at exit."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    if any(c.isspace() for c in str(data_dir)):
        raise RuntimeError(f"the temporary directory {data_dir} contains whitespace")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentplatform.settings"
    os.environ["DATA_DIR"] = str(data_dir)
    os.environ["EGRESS_ALLOWLIST"] = "127.0.0.1/32"
    os.environ.setdefault("LOG_LEVEL", "WARNING")

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return data_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """A subprocess in its own process group (so its children stop with it), logged to a file."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        from agentplatform.processes import die_with_parent

        self.name, self.log = name, log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )

    def tail(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError):  # prefork children left over
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log_file.close()


def wait_worker(worker: Child, timeout_s: float = 60.0) -> float:
    from agentplatform.tasks import ping

    started = time.perf_counter()
    while True:
        try:
            if ping.apply_async(expires=2).get(timeout=2) == "pong":
                return time.perf_counter() - started
        except Exception:
            if worker.process.poll() is not None or time.perf_counter() - started > timeout_s:
                raise RuntimeError(f"the Celery worker did not start:\n{worker.tail()}") from None


def wait_web(web: Child, port: int, timeout_s: float = 60.0) -> float:
    started = time.perf_counter()
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return time.perf_counter() - started
        if web.process.poll() is not None or time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"uvicorn did not start:\n{web.tail()}")
        time.sleep(0.05)


def _child_env() -> dict[str, str]:
    from agentplatform.management.commands.serve import child_env

    return child_env()
