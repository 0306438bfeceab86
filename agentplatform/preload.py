"""The children of `manage.py serve`, forked from one process that loaded the platform once.

Run as `python -m agentplatform.preload <fd>` (serve replaces itself with it once the
database is ready: the same pid, so the children are still serve's): read the plan from
that inherited pipe (`plan` below), load what every child loads as it starts (`preload`),
fork each child, then replace this process with agentplatform.supervisor, which watches
them holding no Django.

Why: each child started as a new Python held its own copy of Django, every app's models and
admin, the Celery app and its tasks, the openai SDK (about 90 MB of PSS each,
bench/footprint.py). Forked after that is loaded, the children share those pages (copy on
write: a child copies only the pages it writes), and once this process leaves for the
supervisor's image, they are shared among the children alone. Each child is still a process
of its own running the same command as before (`python -m uvicorn ...`, `python -m celery
... worker`: serve.platform_commands), named so in `ps`; what only one kind of child needs
(the web's URLconf and views) it loads itself, after the fork.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from agentplatform import supervisor


def plan(
    children: dict[str, list[str]],
    *,
    cwd: Path,
    listen: tuple[str, int],
    banner: list[str],
    started: float,
    embedded_data_dir: Path | None,
    embedded: list[str],
) -> str:
    """What this module is given: the children's commands by name (`[python, "-m", module,
    *args]` runs forked from the preloaded process; any other command is executed as it
    is), the directory they run in, and what it hands to the supervisor (the address the
    web server listens on, the lines printed once it does, the time.monotonic() serve
    started at, the embedded servers held: supervisor.plan)."""
    return json.dumps(
        {
            "children": children,
            "cwd": str(cwd),
            "watch": supervisor.plan(
                {},
                listen=listen,
                banner=banner,
                started=started,
                embedded_data_dir=embedded_data_dir,
                embedded=embedded,
            ),
        }
    )


def main(argv: list[str]) -> int:
    stopping: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: stopping.append(signum))
    # serve blocked them across the exec: one sent meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    given = json.loads(supervisor.read_pipe(int(argv[1])))
    watch = json.loads(given["watch"])
    os.chdir(given["cwd"])
    commands: dict[str, list[str]] = given["children"]
    modules = {command[2] for command in commands.values() if _forked(command)}
    loaded = bool(stopping) or not modules or _preload(modules)
    if not loaded:
        watch["failed"] = "the platform could not be loaded (the error above)"
    elif not stopping:
        # (A child leaves through SystemExit raised up to the interpreter: nothing around
        # this line may catch it.)
        watch["children"] = {name: start(command) for name, command in commands.items()}
    watch["stop"] = bool(stopping)
    return _become_supervisor(watch)


def preload(modules: set[str]) -> None:
    """Load what every child loads as it starts: Django set up (settings, every app's
    models and admin), the Celery app and every task module (what `celery worker` imports;
    the web sends those tasks), its Redis transport, the start-up checks, the connection
    pool, the openai SDK; with `celery` among the children's `modules`, its command line
    (9 MB a worker, most of it the REPL its `amqp` command brings). Then `gc.freeze()`: a
    child's collector skips these objects, so it never writes into (and copies) their
    pages. Opens no connection and starts no thread: a fork copies neither safely. Costs
    the seconds each child spent on it before, once."""
    import django

    django.setup(set_prefix=False)
    import kombu.transport.redis  # noqa: F401
    import psycopg_pool  # noqa: F401

    # The openai SDK: Django's set-up no longer loads it (providers.services imports it when
    # a connection's adapter is made), but every child here may call a model: share it.
    import providers.runtime.openai_adapter  # noqa: F401
    from agentplatform import startup_checks  # noqa: F401
    from agentplatform.celery import app

    app.loader.import_default_modules()
    if "celery" in modules:
        import celery.apps.worker
        import celery.bin.celery  # noqa: F401
    gc.collect()
    gc.freeze()


def _preload(modules: set[str]) -> bool:
    """preload(modules); False (with the traceback printed) when it fails."""
    try:
        preload(modules)
    except Exception:
        traceback.print_exc()
        return False
    return True


def _forked(command: list[str]) -> bool:
    return len(command) >= 3 and command[0] == sys.executable and command[1] == "-m"


def start(command: list[str]) -> int:
    """Fork a child that runs `command`; its pid. In the child this never returns: it runs
    the command and leaves through SystemExit, as the interpreter of `python -m` would (its
    threads joined, its exit hooks run)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    sys.exit(_run_child(command))


def _run_child(command: list[str]) -> int | str | None:
    """In a forked child: what `command` started afresh would do, on the loaded modules."""
    from setproctitle import setproctitle

    from agentplatform.processes import die_with_parent

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    try:
        if not _forked(command):
            os.execv(command[0], command)  # noqa: S606 (serve's own commands)
        setproctitle(" ".join(command))  # what `ps` (and bench/footprint.py) sees
        sys.argv = [command[2], *command[3:]]  # (runpy puts the module's file first)
        runpy.run_module(command[2], run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        return exit.code
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _become_supervisor(watch: dict) -> int:
    """Replace this process with agentplatform.supervisor (no Django: the pages only this
    process still held are freed; the children keep sharing theirs). A stop signal that
    comes meanwhile stays pending until the supervisor takes it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    fd = supervisor.pipe_with(json.dumps(watch))
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [sys.executable, "-m", "agentplatform.supervisor", str(fd)]
    try:
        os.execv(sys.executable, argv)  # noqa: S606 (our own interpreter and module)
    except OSError as exc:  # then this process supervises, as it is
        print(f"could not start the light supervisor ({exc}); going on", file=sys.stderr)
        os.close(fd)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        return supervisor.run(watch)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
