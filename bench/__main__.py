"""Every benchmark in bench/: `python -m bench` runs them in full, one after another (`make
bench`); `python -m bench --smoke` with a few iterations of every section (BENCH_SMOKE=1,
bench/common.py; `make bench-smoke`, part of `make test`), two at a time (`--jobs`: smoke
figures are no measurements, so they may share the machine; full runs never do by default).
Names pick some: `python -m bench --smoke agents tools`.

A benchmark fails when it exits non-zero (a crash included), runs past its time limit, or
has no figures: its results document (bench/common.py, `write_results`) not written by this
run, or a headline figure in it that is not a number. All of them run; then each failure is
listed by the script's name, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
NOT_BENCHMARKS = {"common.py"}  # what the benchmarks share
SMOKE_LIMIT_S = 240.0  # a smoke run takes seconds; past this it hangs
FULL_LIMIT_S = 3600.0


@dataclass
class Outcome:
    script: str
    seconds: float
    cpu_s: float  # its processes' and their children's (on a shared machine, wall time waits)
    failure: str | None  # None: it ran and wrote its figures


@dataclass
class Running:
    """A benchmark's process (the leader of its own process group: the processes it starts
    stop with it, bench/common.py Child) and, when output is collected, its log."""

    script: Path
    process: subprocess.Popen
    log: IO[bytes] | None
    started: float = field(default_factory=time.perf_counter)
    since: float = field(default_factory=lambda: time.time() - 1)  # for the results' mtime


def benchmarks(names: list[str]) -> list[Path]:
    found = sorted(
        path
        for path in BENCH.glob("*.py")
        if path.name not in NOT_BENCHMARKS and not path.name.startswith("_")
    )
    if not names:
        return found
    by_name = {path.stem: path for path in found}
    unknown = [name for name in names if name.removesuffix(".py") not in by_name]
    if unknown:
        raise SystemExit(f"no such benchmark: {', '.join(unknown)} (known: {', '.join(by_name)})")
    return [by_name[name.removesuffix(".py")] for name in names]


def start(script: Path, env: dict[str, str], log: IO[bytes] | None) -> Running:
    """`log` None: the output goes straight to ours (one benchmark at a time)."""
    process = subprocess.Popen(
        [sys.executable, str(script.relative_to(ROOT))],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        start_new_session=True,
    )
    return Running(script, process, log)


def finished(running: Running) -> tuple[int, float] | None:
    """(exit status, CPU seconds of it and the children it waited for), once it has ended."""
    pid, status, usage = os.wait4(running.process.pid, os.WNOHANG)
    if pid == 0:
        return None
    running.process.returncode = os.waitstatus_to_exitcode(status)
    return running.process.returncode, usage.ru_utime + usage.ru_stime


def stop(running: Running) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(running.process.pid, signal.SIGKILL)


def missing_figures(path: Path, since: float) -> str | None:
    """Why the results document at `path` holds no figures of this run, or None."""
    try:
        if path.stat().st_mtime < since:
            return f"{path.name} was not written by this run"
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return f"it wrote no {path.name}"
    except ValueError as exc:
        return f"{path.name} is not JSON ({exc})"
    headline = document.get("headline") if isinstance(document, dict) else None
    if not isinstance(headline, dict) or not headline:
        return f"{path.name} has no headline figures"
    bad = [
        key
        for key, value in headline.items()
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ]
    if bad:
        return f"no figure for {', '.join(bad)} in {path.name}"
    return None


def data_template(data_dir: Path, env: dict[str, str]) -> str:
    """A migrated DATA_DIR that the smoke runs copy instead of each migrating its own
    (bench/common.py, configure_django)."""
    started = time.perf_counter()
    code = "import sys, pathlib, bench.common as c; c.make_data_template(pathlib.Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(data_dir)], cwd=ROOT, env=env, check=True)
    print(
        f"== a migrated DATA_DIR for the benchmarks to copy: {time.perf_counter() - started:.1f} s"
    )
    return str(data_dir)


def run_all(
    scripts: list[Path], env: dict[str, str], *, jobs: int, limit_s: float, logs: Path
) -> list[Outcome]:
    """Run `scripts`, `jobs` at a time; with more than one, each one's output is collected
    and printed when it ends, whole."""
    results = Path(env.get("BENCH_RESULTS_DIR") or BENCH / "results")
    waiting, running, outcomes = list(scripts), [], []
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                script = waiting.pop(0)
                log = (logs / f"{script.stem}.log").open("w+b") if jobs > 1 else None
                if log is None:
                    print(f"\n== bench/{script.name}", flush=True)
                running.append(start(script, env, log))
            time.sleep(0.1)
            for one in list(running):
                ended = finished(one)
                seconds = time.perf_counter() - one.started
                if ended is None and seconds <= limit_s:
                    continue
                if ended is None:
                    stop(one)
                    one.process.wait()
                    status, cpu_s = None, 0.0
                else:
                    status, cpu_s = ended
                running.remove(one)
                if status is None:
                    failure = f"still running after {limit_s:g} s: stopped"
                elif status != 0:
                    failure = f"exited with status {status}"
                else:
                    failure = missing_figures(results / f"{one.script.stem}.json", one.since)
                if one.log is not None:
                    one.log.seek(0)
                    output = one.log.read().decode(errors="replace")
                    one.log.close()
                    print(f"\n== bench/{one.script.name}\n{output}", end="", flush=True)
                print(f"== bench/{one.script.name}: {failure or 'ok'} in {seconds:.1f} s")
                outcomes.append(Outcome(one.script.name, seconds, cpu_s, failure))
    finally:
        for one in running:  # interrupted: nothing is left behind
            stop(one)
            one.process.wait()
    return sorted(outcomes, key=lambda o: o.script)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few iterations of everything")
    parser.add_argument("--jobs", type=int, help="benchmarks at once (default: smoke 2, full 1)")
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = parser.parse_args()
    scripts = benchmarks(args.names)
    mode = "smoke" if args.smoke else "full"
    jobs = max(1, args.jobs or (2 if args.smoke else 1))
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_SMOKE", "BENCH_DATA_TEMPLATE")}
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        if args.smoke:
            env["BENCH_SMOKE"] = "1"
            if not env.get("BENCH_RESULTS_DIR"):  # fresh: no earlier run's file counts
                env["BENCH_RESULTS_DIR"] = str(scratch / "results")
            if any("configure_django" in script.read_text() for script in scripts):
                env["BENCH_DATA_TEMPLATE"] = data_template(scratch / "data", env)
        limit_s = SMOKE_LIMIT_S if args.smoke else FULL_LIMIT_S
        outcomes = run_all(scripts, env, jobs=jobs, limit_s=limit_s, logs=scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = time.perf_counter() - started
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nbenchmarks ({mode}, {jobs} at a time): {total:.1f} s in all; load average {load}")
    print(f"  {'':<26}{'wall s':>7}{'CPU s':>7}")
    for outcome in outcomes:
        verdict = f"FAILED: {outcome.failure}" if outcome.failure else "ok"
        print(
            f"  bench/{outcome.script:<20}{outcome.seconds:>7.1f}{outcome.cpu_s:>7.1f}  {verdict}"
        )
    failed = [o.script for o in outcomes if o.failure]
    if failed:
        print(f"failed: {', '.join(f'bench/{name}' for name in failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
