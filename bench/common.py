"""What the benchmarks share: the smoke mode and the results file, Django on a temporary
DATA_DIR with the embedded services, and child processes (uvicorn, Celery workers) started
the way `manage.py serve` starts them.

Smoke mode (BENCH_SMOKE=1; `python -m bench --smoke`, `make bench-smoke`): every section of
a benchmark runs with a few iterations (`sized`), so that the whole script takes seconds and
CI can run it; the figures it prints and writes are labelled as smoke: they show that the
benchmark still runs and measures what it says, not what the code costs.

Every benchmark ends with `write_results`: its JSON document, with `headline` (its key
figures, each a number) and `smoke`, in bench/results/<name>.json (a smoke run's in
bench/results/smoke/, never over a full run's figures; BENCH_RESULTS_DIR chooses another
folder). A script whose
document lacks a headline figure has no figures: the smoke run fails it (bench/__main__.py).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
SMOKE = os.environ.get("BENCH_SMOKE", "") not in ("", "0")

T = TypeVar("T")


def sized(full: T, *, smoke: T) -> T:
    """`full` in a benchmark run, `smoke` in a smoke run."""
    return smoke if SMOKE else full


def results_dir() -> Path:
    """Where the JSON documents go: BENCH_RESULTS_DIR when set, else bench/results (ignored
    by git; a smoke run's in its smoke/ folder)."""
    chosen = os.environ.get("BENCH_RESULTS_DIR")
    if chosen:
        return Path(chosen)
    return ROOT / "bench" / "results" / ("smoke" if SMOKE else "")


def machine_speed_ms() -> float:
    """CPU milliseconds a fixed pure-Python loop takes now (the best of three): how fast this
    shared machine runs at the moment (about 60 ms when quick; up to half more in a slow
    spell). A slow reading says a benchmark's CPU figures are inflated; a quick one does not
    say they are not (a spell may fall between readings)."""
    best = float("inf")
    for _ in range(3):
        started, total = time.process_time(), 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.process_time() - started)
    return best * 1000


def speed_line(before_ms: float, after_ms: float) -> str:
    return (
        f"machine speed: a fixed Python loop took {before_ms:.0f} ms of CPU before the "
        f"benchmark, {after_ms:.0f} after (about 60 when this machine is quick; slower "
        f"readings inflate the CPU figures)"
    )


def write_results(
    name: str, document: Mapping[str, Any], *, headline: Mapping[str, float | None]
) -> Path:
    """Write `document` as results_dir()/<name>.json, with `headline` (the key figures,
    one number each: None where a side measured nothing) and `smoke`; print the headline
    and where it went. Returns the path."""
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    body = {"smoke": SMOKE, "headline": dict(headline), **document}
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    label = "SMOKE RUN, a few samples: not a measurement. " if SMOKE else ""
    figures = ", ".join(f"{key} {_figure(value)}" for key, value in headline.items())
    print(f"\n{label}headline: {figures}")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"wrote {shown}")
    return path


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def request_budgets_unlimited() -> None:
    """Request budgets no benchmark reaches, for this process and the servers it starts
    (its rounds send thousands of requests a minute with one key): the limiter still
    counts every request, so its cost stays in the figures. Before configure_django."""
    os.environ["API_RATE_PER_KEY"] = "1000000/min"
    os.environ["API_RATE_PER_TENANT"] = "1000000/min"


def configure_django(prefix: str) -> Path:
    """Settings on a fresh temporary DATA_DIR (the embedded PostgreSQL and Redis start
    there), migrated; the directory is removed at exit. With BENCH_DATA_TEMPLATE (a smoke
    run's: `make_data_template`), the DATA_DIR starts as a copy of that migrated one, which
    saves the seconds of initdb and the migrations."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    if any(c.isspace() for c in str(data_dir)):
        raise RuntimeError(f"the temporary directory {data_dir} contains whitespace")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    template = os.environ.get("BENCH_DATA_TEMPLATE")
    if template:  # `cp -a`: the PostgreSQL files keep their owner (pgserver's user, as root)
        subprocess.run(["cp", "-a", f"{template}/.", str(data_dir)], check=True)
    _setup_django(data_dir)
    return data_dir


def make_data_template(data_dir: Path) -> None:
    """A migrated DATA_DIR at `data_dir` for configure_django to copy; its services stop
    when this process exits (so copies of it are consistent). Seconds."""
    _setup_django(data_dir)


def _setup_django(data_dir: Path) -> None:
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


def cpu_seconds(groups: Mapping[str, list[int]], postgres: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system, with the children they reaped) per name: of the process
    groups listed under it (a Child leads one: a serve process and its children), and under
    "PostgreSQL" of the embedded server `postgres` and its backends. One pass over /proc."""
    used = dict.fromkeys([*groups, "PostgreSQL"], 0)
    for pid, ppid, group, fields in _processes():
        ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        for name, listed in groups.items():
            if group in listed:
                used[name] += ticks
        if postgres in (pid, ppid):
            used["PostgreSQL"] += ticks
    return {name: ticks / os.sysconf("SC_CLK_TCK") for name, ticks in used.items()}


def main_thread_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds of these processes' main threads alone: a Celery worker's consumer, which
    takes the messages, beside the threads its runs execute on. The scheduler's nanoseconds
    on a CPU (schedstat), not clock ticks: a consumer spends a few ticks per burst."""
    ns = 0
    for pid in pids:
        try:
            ns += int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return ns / 1e9


def proc_kb(pid: int, file: str, field: str) -> int | None:
    """A kB field of /proc/<pid>/<file> (status: VmRSS, VmHWM; smaps_rollup: Pss), or None
    when the process is gone."""
    try:
        with open(f"/proc/{pid}/{file}") as lines:
            for line in lines:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def group_pids(groups: list[int]) -> list[int]:
    """The processes of these process groups (each Child and its children), from /proc."""
    return [pid for pid, _, group, _ in _processes() if group in groups]


def postmaster_pid(data_dir: Path) -> int | None:
    """The embedded PostgreSQL server's process (DATA_DIR/postgres), if it runs."""
    pid_file = data_dir / "postgres" / "postmaster.pid"
    return int(pid_file.read_text().split()[0]) if pid_file.exists() else None


def _processes() -> Iterator[tuple[int, int, int, list[str]]]:
    """pid, parent, process group and /proc/<pid>/stat's fields after "pid (comm)" of every
    process (those gone meanwhile left out)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        yield int(stat.parent.name), int(fields[1]), int(fields[2]), fields


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """A subprocess in its own process group (so its children stop with it), logged to a file."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        *,
        python: Path | None = None,
        cwd: Path = ROOT,
    ) -> None:
        """`env`: what `manage.py serve` gives its children (`child_env()`, the default);
        `python`: another venv's interpreter (this one's by default)."""
        from agentplatform.processes import die_with_parent

        self.name, self.log = name, log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [str(python or sys.executable), *args],
            cwd=cwd,
            env=env if env is not None else child_env(),
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


def child_env() -> dict[str, str]:
    """The environment `manage.py serve` gives its children: the owner's DATABASE_URL, from
    which each child logs in as the app role itself. Take it before this process assumes the
    app role (rls.assume_app_role): after, the URL would name the app role without its
    password."""
    from agentplatform.management.commands import serve

    return serve.child_env()
