"""The children of `manage.py serve`, forked from one process that loaded the platform once.

Serve's own process, once the database is ready (agentplatform/management/commands/serve.py),
calls `run`: load what every child loads as it starts (`preload`), fork each child, then
replace this process with agentplatform.supervisor (the same pid, so the children stay its
children), which watches them holding no Django.

Why: each child started as a new Python held its own copy of Django, every app's models and
admin, the Celery app and its tasks, the openai SDK (about 90 MB of PSS each,
bench/footprint.py). Forked after that is loaded, the children share those pages (copy on
write: a child copies only the pages it writes), and once this process leaves for the
supervisor's image, they are shared among the children alone. Each child is still a process
of its own running the same command as before (`python -m uvicorn ...`, `python -m celery
... worker`: serve.platform_commands), named so in `ps`; what only one kind of child needs
(the web's URLconf and views) it loads itself, after the fork. Serve's system checks and
migrate ran in a child of their own, so none of this process's pages hold the URLconf or
the migration graph.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import sys
import traceback

from setproctitle import getproctitle, setproctitle

from agentplatform import supervisor
from agentplatform.collector import freeze_what_was_loaded

# setproctitle finds this process's argv beside its environment block on its first call,
# which fails silently once a variable has been given a new value (serve's child_env may
# change the first one): called now, as serve imports this module, before it changes any.
getproctitle()


def run(commands: dict[str, list[str]], watch: dict, stopping: list[int]) -> int:
    """Fork a child per command of `commands` (`[python, "-m", module, *args]` runs forked
    from this process once it has loaded what those modules load; any other command is
    executed as it is), unless `stopping` (the stop signals received, appended by the
    caller's handlers) says stop; then become the supervisor given `watch` (supervisor.plan)
    and the children. Returns only if the supervisor's image could not start (its exit
    status, having supervised here)."""
    given = {**watch}
    modules = {command[2] for command in commands.values() if _forked(command)}
    loaded = bool(stopping) or not modules or _preload(modules)
    if not loaded:
        given["failed"] = "the platform could not be loaded (the error above)"
    elif not stopping:
        # (A child leaves through SystemExit raised up to the interpreter: nothing around
        # this line may catch it.)
        given["children"] = {name: start(command) for name, command in commands.items()}
    given["stop"] = bool(stopping)
    return _become_supervisor(given)


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
    freeze_what_was_loaded()


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
    from agentplatform.processes import die_with_parent

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Serve's exit hooks release its handles on the embedded servers: not a child's to run.
    atexit._clear()
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
