"""The last part of `manage.py serve`, in a process image of its own: watch the web server and
the workers, stop them all when one exits or on Ctrl-C / SIGTERM, then the embedded
PostgreSQL and Redis (when this process holds them).

Why an image of its own: the process that migrated and seeded held Django, every app and
the migration graph (about 120 MB PSS, bench/footprint.py) only to wait. Once everything is
up, `serve` replaces itself with this module (`os.execv`: the same pid, so the children stay
its children and its handles on the embedded servers stay registered), which imports no
Django. Run as `python -m agentplatform.supervisor <plan as JSON>`; `plan` below.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.2
STOP_GRACE_S = 10.0


def plan(children: dict[str, int], embedded_data_dir: Path | None, embedded: list[str]) -> str:
    """What the supervisor is given: the children's pids by name, and which embedded servers
    ("postgres", "redis") of which data dir it holds."""
    data_dir = str(embedded_data_dir) if embedded_data_dir else None
    return json.dumps({"children": children, "data_dir": data_dir, "embedded": embedded})


def main(argv: list[str]) -> int:
    stopping: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: stopping.append(signum))
    # serve blocked them across the exec: one sent meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    given = json.loads(argv[1])
    children: dict[str, int] = given["children"]
    if given["embedded"]:
        from agentplatform import embedded  # (registers the handles' release at exit)

        try:
            embedded.hold(Path(given["data_dir"]), servers=given["embedded"])
        except SystemExit:  # a signal meanwhile: stop everything
            stopping.append(signal.SIGTERM)
    failed = _supervise(children, stopping)
    _stop(children)
    if failed:
        print(f"CommandError: {failed} exited unexpectedly; stopped everything.", file=sys.stderr)
        return 1
    print("Stopped.", flush=True)
    return 0


def _supervise(children: dict[str, int], stopping: list[int]) -> str | None:
    """The name of the first child to exit, or None once asked to stop."""
    while not stopping:
        for name, pid in children.items():
            if _exited(pid):
                return name
        time.sleep(POLL_S)
    return None


def _stop(children: dict[str, int]) -> None:
    running = [pid for pid in children.values() if not _exited(pid)]
    for pid in running:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while running and time.monotonic() < deadline:
        running = [pid for pid in running if not _exited(pid)]
        time.sleep(0.05)
    for pid in running:
        _signal(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _exited(pid: int) -> bool:
    """Has the child ended (reaped now)? True for a pid that is no longer our child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
