"""The memory of `make run`'s processes: proportional set size (PSS) of every process of the
platform, idle and with N runs in flight, per kind of process and in all.

Run: cd /work/main && .venv/bin/python bench/footprint.py   (N=100, a 10 s model)
     BENCH_SMOKE=1 .venv/bin/python bench/footprint.py   (N=10, a 2 s model)
(prints a table, writes bench/results/footprint.json). Needs no network and no
configuration: the embedded PostgreSQL and Redis start in a temporary DATA_DIR, then
`manage.py serve` (what `make run` runs) on a free port with that DATA_DIR and nothing else
configured, so it shares the embedded services as a second process of `make run` would and
starts exactly its children (uvicorn, the runs workers with beat in the first, the batch
worker). Everything stops, and the DATA_DIR is removed, at exit, on error too. Only the API
rate limits are raised (the bench sends N chats with one key at once).

Measured: PSS (/proc/<pid>/smaps_rollup; shared pages divided among the processes sharing
them, so the sum is the memory the platform holds) of serve's process tree and of the
embedded PostgreSQL (postmaster, its background processes and one backend per connection)
and Redis: (1) once healthy (GET /healthz answers 200 and every worker logged "ready"),
(2) idle after a few warm-up chats (the state of a platform that has served), (3) while N
streaming chats through `/v1/chat/completions` are in flight: the fake model
(tests/fakes/provider_server.py, its own process, not counted) holds every answer LATENCY_S,
and PSS is sampled every SAMPLE_EVERY_S once all N requests are at the model; the sample
with the largest total is reported; (4) settled once those chats ended; (5) N chats in flight
again; (6) settled, then 2N chats in flight.

The first burst's growth holds what a platform gains once, at its first such load (each
process's pool growing to its burst, PostgreSQL backends caching the catalog of what the
burst runs, the forked children copying the pages they write; it stays once the runs have
ended), besides what the N runs hold: from idle, 50, 100 and 200 chats at once added 14.7,
about 20 and 31.4 MB, about 9 MB once and 11 MB per 100. What N more runs in flight add is
(6) against (5): 2N at once against N at once, past that first load. The target is judged on
that figure, per 100 runs; all three are printed. The bench's own process and the fake
model are not counted; the bench closes its database connections before each measurement.

Targets from issue #35: at most 500 MB in all idle, at most 20 MB more per 100 runs in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import psutil  # noqa: E402

from bench.api import RemoteServer  # noqa: E402
from bench.common import (  # noqa: E402
    Child,
    configure_django,
    free_port,
    proc_kb,
    request_budgets_unlimited,
    sized,
    write_results,
)
from bench.concurrency import AGENT, chats_at_once, create_fixture  # noqa: E402

IN_FLIGHT = sized(100, smoke=10)
LATENCY_S = sized(10.0, smoke=2.0)
WARMUP_CHATS = sized(5, smoke=2)
SAMPLE_EVERY_S = 0.5
START_TIMEOUT_S = 120.0
TARGET_IDLE_MB = 500.0
TARGET_MB_PER_100 = 20.0
WORKERS_READY = re.compile(rb"\bready\.")  # Celery's "celery@runs1 ready." (INFO)


# -- the processes and their PSS ----------------------------------------------------------------
def _pid_file(path: Path) -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
        return int(path.read_text().split()[0])
    return None


# The names serve gives its children (serve.platform_commands), by what their command line holds.
_CHILD_KINDS = (("uvicorn", "web (uvicorn)"), ("runs1@", "runs worker 1"),
                ("runs2@", "runs worker 2"), ("batch@", "batch worker"))  # fmt: skip
_PG_CONNECTION = re.compile(r"\[local\]|\d+\.\d+\.\d+\.\d+\(\d+\)")


def processes(serve: psutil.Process, data_dir: Path) -> dict[int, str]:
    """pid -> kind, for every process of the platform now."""
    found: dict[int, str] = {serve.pid: "serve (manage.py, the supervisor)"}
    with contextlib.suppress(psutil.Error):
        for child in serve.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                line = " ".join(child.cmdline())
                parent = found.get(child.ppid())
                if child.ppid() != serve.pid and parent is not None:  # forked by a child
                    found[child.pid] = f"{parent}: " + ("beat" if "beat" in line else "pool")
                else:
                    kind = next((k for mark, k in _CHILD_KINDS if mark in line), None)
                    found[child.pid] = kind or f"other ({child.name()})"
    postmaster = _pid_file(data_dir / "postgres" / "postmaster.pid")
    if postmaster is not None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(postmaster)
            found[root.pid] = "PostgreSQL server processes"
            for child in root.children():
                with contextlib.suppress(psutil.Error):
                    line = " ".join(child.cmdline())
                    found[child.pid] = (
                        "PostgreSQL connections" if _PG_CONNECTION.search(line)
                        else "PostgreSQL server processes"
                    )  # fmt: skip
    redis = _pid_file(data_dir / "redis" / "redis.pid")
    if redis is not None:
        found[redis] = "Redis"
    return found


@dataclass
class Sample:
    """PSS in MB and the number of processes, per kind; the total."""

    mb: dict[str, float]
    count: dict[str, int]

    @property
    def total(self) -> float:
        return sum(self.mb.values())


def sample(serve: psutil.Process, data_dir: Path) -> Sample:
    mb: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for pid, kind in processes(serve, data_dir).items():
        kb = proc_kb(pid, "smaps_rollup", "Pss")
        if kb is not None:
            mb[kind] += kb / 1024
            count[kind] += 1
    return Sample(dict(mb), dict(count))


def close_own_connections() -> None:
    """End the bench's own PostgreSQL backends, so that they are not counted as the
    platform's: giving a pooled connection back (close_all) keeps its backend open (with
    the migrations' catalog caches: 12 MB PSS), so the pool is closed too."""
    from django.db import connections

    connections.close_all()
    for connection in connections.all():
        if getattr(connection, "pool", None) is not None:
            connection.close_pool()


def quiet_sample(serve: psutil.Process, data_dir: Path, settle_s: float = 1.0) -> Sample:
    """A sample once the bench's own connections are closed and the platform has settled."""
    close_own_connections()
    time.sleep(settle_s)
    return sample(serve, data_dir)


# -- starting and waiting ----------------------------------------------------------------------
def wait_healthy(serve: Child, port: int, workers: int) -> float:
    """Seconds until /healthz answers 200 and `workers` Celery workers logged "ready"."""
    started = time.perf_counter()
    while time.perf_counter() - started < START_TIMEOUT_S:
        if serve.process.poll() is not None:
            break
        with contextlib.suppress(httpx2.HTTPError):
            healthy = httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            ready = len(WORKERS_READY.findall(serve.log.read_bytes()))
            if healthy and ready >= workers:
                return time.perf_counter() - started
        time.sleep(0.2)
    raise RuntimeError(f"`manage.py serve` did not become healthy:\n{serve.tail()}")


def in_flight_peak(
    url: str, key: str, model: RemoteServer, serve: psutil.Process, data_dir: Path, n: int
) -> tuple[Sample, int, int]:
    """`n` chats at once; the sample with the largest total while all were at the model,
    the number of samples, and the errors among the chats."""
    close_own_connections()
    outcome: list = []
    thread = threading.Thread(
        target=lambda: outcome.append(asyncio.run(chats_at_once(url, key, AGENT, n))),
        daemon=True,
    )
    thread.start()
    samples: list[Sample] = []
    deadline = time.perf_counter() + LATENCY_S + 60
    while thread.is_alive() and time.perf_counter() < deadline:
        if model.ask("in_flight") >= n:
            samples.append(sample(serve, data_dir))
        time.sleep(SAMPLE_EVERY_S)
    thread.join(LATENCY_S + 60)
    if not outcome:
        raise RuntimeError("the chats did not end")
    chats, _ = outcome[0]
    errors = [c.error for c in chats if c.error]
    if not samples:
        raise RuntimeError(
            f"never were all {n} chats at the model at once ({len(errors)} errors: {errors[:3]})"
        )
    return max(samples, key=lambda s: s.total), len(samples), len(errors)


# -- output ------------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def print_growth(settled: Sample, again: Sample, title: str, column: str = "settled") -> None:
    """Per kind of process, `again` against `settled` (the column named `column`)."""
    kinds = sorted(set(settled.mb) | set(again.mb), key=lambda k: -settled.mb.get(k, 0))
    print(f"\n{title}")
    print(f"{'process kind':<42}{'procs':>6}{column:>9}{'in flight':>11}{'added':>9}")
    for kind in kinds:
        procs = f"{settled.count.get(kind, 0)}/{again.count.get(kind, 0)}"
        before, after = settled.mb.get(kind, 0), again.mb.get(kind, 0)
        print(f"{kind:<42}{procs:>6}{before:>9.1f}{after:>11.1f}{after - before:>+9.1f}")
    procs = f"{sum(settled.count.values())}/{sum(again.count.values())}"
    print(
        f"{'total':<42}{procs:>6}{settled.total:>9.1f}{again.total:>11.1f}"
        f"{again.total - settled.total:>+9.1f}"
    )


def print_table(started: Sample, idle: Sample, busy: Sample) -> None:
    kinds = sorted(set(started.mb) | set(idle.mb) | set(busy.mb), key=lambda k: -idle.mb.get(k, 0))
    print(f"\nPSS of `make run`'s processes (MB); {IN_FLIGHT} runs in flight: /v1 streaming chats,")
    print(f"the fake model holding each answer {LATENCY_S:g} s")
    print(f"{'process kind':<42}{'procs':>6}{'started':>9}{'idle':>9}{'in flight':>11}{'added':>9}")
    for kind in kinds:
        procs = f"{idle.count.get(kind, 0)}/{busy.count.get(kind, 0)}"
        print(
            f"{kind:<42}{procs:>6}{started.mb.get(kind, 0):>9.1f}{idle.mb.get(kind, 0):>9.1f}"
            f"{busy.mb.get(kind, 0):>11.1f}{busy.mb.get(kind, 0) - idle.mb.get(kind, 0):>+9.1f}"
        )
    procs = f"{sum(idle.count.values())}/{sum(busy.count.values())}"
    print(
        f"{'total':<42}{procs:>6}{started.total:>9.1f}{idle.total:>9.1f}{busy.total:>11.1f}"
        f"{busy.total - idle.total:>+9.1f}"
    )
    print("  procs: processes idle / in flight; idle: after warm-up chats; added: in flight - idle")


def main() -> int:
    request_budgets_unlimited()
    data_dir = configure_django("bench-footprint-")
    from agentplatform.management.commands.serve import platform_commands

    load_at_start = os.getloadavg()
    workers = len(platform_commands("127.0.0.1", 0)) - 1  # every command but the web server's
    model = RemoteServer(latency_s=LATENCY_S, chunk_delay_s=0.005)
    serve: Child | None = None
    try:
        key = create_fixture(model.url)
        port = free_port()
        # As `make run`: nothing configured but the DATA_DIR (os.environ, set above), so serve
        # shares the embedded services through their handles and starts its own children.
        serve = Child(
            "serve", ["manage.py", "serve", "--port", str(port)], data_dir / "serve.log",
            env=dict(os.environ),
        )  # fmt: skip
        healthy_s = wait_healthy(serve, port, workers)
        tree = psutil.Process(serve.process.pid)
        started = quiet_sample(tree, data_dir)
        url = f"http://127.0.0.1:{port}/v1"
        chats, _ = asyncio.run(chats_at_once(url, key, AGENT, WARMUP_CHATS))
        if any(c.error for c in chats):
            raise RuntimeError(f"a warm-up chat failed: {[c.error for c in chats if c.error]}")
        idle = quiet_sample(tree, data_dir, settle_s=LATENCY_S / 4 + 1)
        busy, samples, errors = in_flight_peak(url, key, model, tree, data_dir, IN_FLIGHT)
        settled = quiet_sample(tree, data_dir, settle_s=LATENCY_S / 4 + 1)
        again, samples_again, errors_again = in_flight_peak(
            url, key, model, tree, data_dir, IN_FLIGHT
        )
        settled_again = quiet_sample(tree, data_dir, settle_s=LATENCY_S / 4 + 1)
        double, samples_double, errors_double = in_flight_peak(
            url, key, model, tree, data_dir, 2 * IN_FLIGHT
        )
    except BaseException:
        if serve is not None:
            print(f"serve's log, last lines:\n{serve.tail()}", file=sys.stderr)
        raise
    finally:
        if serve is not None:
            serve.stop()
        model.close()

    print_table(started, idle, busy)
    print_growth(
        settled, again, f"The same {IN_FLIGHT} chats again, from the settled state after the first:"
    )
    print_growth(
        again,
        double,
        f"{2 * IN_FLIGHT} chats at once (settled after the second burst) against the "
        f"{IN_FLIGHT} of that burst:",
        column=f"{IN_FLIGHT} runs",
    )
    per_100 = (busy.total - idle.total) / IN_FLIGHT * 100
    per_100_again = (again.total - settled.total) / IN_FLIGHT * 100
    per_100_more = (double.total - again.total) / IN_FLIGHT * 100
    print(
        f"\n{samples}, {samples_again} and {samples_double} samples while all the chats of "
        f"each burst were at the model; {errors}, {errors_again} and {errors_double} errors"
    )
    print(
        f"idle total {idle.total:.0f} MB (target <= {TARGET_IDLE_MB:g}): "
        f"{verdict(idle.total <= TARGET_IDLE_MB)}"
    )
    print(
        f"added per 100 more runs in flight ({2 * IN_FLIGHT} at once against {IN_FLIGHT}) "
        f"{per_100_more:+.1f} MB (target <= {TARGET_MB_PER_100:g}): "
        f"{verdict(per_100_more <= TARGET_MB_PER_100)}"
    )
    print(
        f"  the first burst, from idle: {per_100:+.1f} MB per 100 (what the platform gains "
        f"once at its first load, with what the runs hold); the same burst again, from "
        f"settled: {per_100_again:+.1f} MB per 100"
    )
    document = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_start_end": [load_at_start, os.getloadavg()],
        },
        "setup": {
            "command": "manage.py serve (make run), DATA_DIR only, API rate limits raised",
            "in_flight": IN_FLIGHT,
            "model_latency_s": LATENCY_S,
            "warmup_chats": WARMUP_CHATS,
            "healthy_after_s": healthy_s,
            "samples_in_flight": [samples, samples_again, samples_double],
            "chat_errors": [errors, errors_again, errors_double],
        },
        "pss_mb": {
            "started": asdict(started),
            "idle": asdict(idle),
            "in_flight": asdict(busy),
            "settled": asdict(settled),
            "in_flight_again": asdict(again),
            "settled_again": asdict(settled_again),
            "in_flight_twice_as_many": asdict(double),
        },
        "targets": {"idle_total_mb": TARGET_IDLE_MB, "mb_per_100_in_flight": TARGET_MB_PER_100},
    }
    headline = {
        "started total MB": started.total,
        "idle total MB": idle.total,
        "in flight total MB": busy.total,
        "MB per 100 more runs in flight": per_100_more,
        "MB per 100 runs in flight, first burst": per_100,
        "MB per 100 runs in flight again": per_100_again,
    }
    write_results("footprint", document, headline=headline)
    return 0 if errors == errors_again == errors_double == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
