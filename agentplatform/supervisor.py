"""The last part of `manage.py serve`, in a process image of its own: watch the web server and
the workers, stop them all when one exits or on Ctrl-C / SIGTERM, then the embedded
PostgreSQL and Redis (when this process holds them).

Why an image of its own: serve's process, which forked the children (agentplatform.preload),
held Django, every app and the Celery tasks (about 95 MB of PSS, bench/footprint.py) only to
wait, in pages the children stop sharing with it as they write them. Once the children are
started, that process replaces itself with this module (`os.execv`: the same pid, so the
children stay its children and its handles on the embedded servers stay registered), which
imports no Django. Run as `python -m agentplatform.supervisor <fd>`, the plan (`plan` below)
read from that inherited pipe (a login password is in it: never on a command line).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

POLL_S = 0.2
STOP_GRACE_S = 10.0


def plan(
    children: dict[str, int],
    *,
    listen: tuple[str, int],
    banner: list[str],
    started: float,
    embedded_data_dir: Path | None,
    embedded: list[str],
) -> dict:
    """What the supervisor is given: the children's pids by name, the address the web
    server listens on and the lines printed once it does (the first with the seconds since
    `started`, a time.monotonic()), and which embedded servers ("postgres", "redis") of
    which data dir it holds. Also read: "stop" (a stop was asked for already) and "failed"
    (what failed before the children could start)."""
    data_dir = str(embedded_data_dir) if embedded_data_dir else None
    return {
        "children": children,
        "listen": list(listen),
        "banner": banner,
        "started": started,
        "data_dir": data_dir,
        "embedded": embedded,
    }


def pipe_with(text: str) -> int:
    """A pipe's reading end, inheritable across an exec, holding `text` (a plan: far below
    a pipe's buffer, so this never blocks)."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    os.set_inheritable(read, True)
    return read


def read_pipe(fd: int) -> str:
    with os.fdopen(fd, "rb") as pipe:
        return pipe.read().decode()


def main(argv: list[str]) -> int:
    return run(json.loads(read_pipe(int(argv[1]))))


def run(given: dict) -> int:
    stopping: list[int] = [signal.SIGTERM] if given.get("stop") else []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: stopping.append(signum))
    # Blocked across the exec: one sent meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    children: dict[str, int] = given["children"]
    if given["embedded"]:
        from agentplatform import embedded  # (registers the handles' release at exit)

        try:
            embedded.hold(Path(given["data_dir"]), servers=given["embedded"])
        except SystemExit:  # a signal meanwhile: stop everything
            stopping.append(signal.SIGTERM)
    if _wait_listening(tuple(given["listen"]), children, stopping):
        up, *notes = given["banner"]
        print(f"{up} ({time.monotonic() - given['started']:.1f}s)", *notes, sep="\n", flush=True)
    if given.get("failed"):
        print(f"CommandError: {given['failed']}; stopped.", file=sys.stderr)
        return 1
    failed = _supervise(children, stopping)
    _stop(children)
    if failed:
        print(f"CommandError: {failed} exited unexpectedly; stopped everything.", file=sys.stderr)
        return 1
    print("Stopped.", flush=True)
    return 0


def _wait_listening(address: tuple[str, int], children: dict[str, int], stopping) -> bool:
    """Wait until the web server accepts connections: False if there are no children, one
    exited or a stop was asked for first."""
    host, port = address
    host = "127.0.0.1" if host == "0.0.0.0" else host  # noqa: S104
    while children and not stopping:
        if any(_exited(pid) for pid in children.values()):
            return False
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


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
