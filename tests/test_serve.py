"""`manage.py serve` end to end: fresh data dir, healthy, clean stop."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT
from tests.live_server import free_port

pytestmark = pytest.mark.integration  # starts processes


class Serve:
    def __init__(self, data_dir: Path, port: int) -> None:
        unset = ("DATABASE_URL", "REDIS_URL", "MCP_RESOURCE_URL", "PORT")
        # DATA_DIR first and relative, as `DATA_DIR=... manage.py serve` in a shell puts it:
        # serve gives it a new value (absolute) before it names its children (their titles).
        env = {"DATA_DIR": os.path.relpath(data_dir, ROOT)}
        env.update((k, v) for k, v in os.environ.items() if k not in (*unset, "DATA_DIR"))
        env.update(
            DEMO_PASSWORD="demo-pass-123",
            DJANGO_SETTINGS_MODULE="agentplatform.settings",
            WORKER_CONCURRENCY="1",
        )
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, like a terminal job
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if re.search(pattern, line):
                    return line
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in output:\n{''.join(self.lines)}")


def get(url: str, opener=None) -> tuple[int, bytes]:
    try:
        with (opener or urllib.request.build_opener()).open(url, timeout=15) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_healthy(base: str, timeout: float = 60) -> tuple[int, bytes]:
    deadline = time.monotonic() + timeout
    while True:  # the worker may need a moment after the web server listens
        status, body = get(f"{base}/healthz")
        if status == 200 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.3)


def smaps_rollup(pid: int) -> dict[str, int]:
    """The kB figures of /proc/<pid>/smaps_rollup (Rss, Pss, ...)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        rows = [line.split() for line in rollup if line.rstrip().endswith("kB")]
    return {row[0].rstrip(":"): int(row[1]) for row in rows}


def processes_using(data_dir: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(data_dir) in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def test_sigterm_while_starting_leaves_nothing_running(tmp_path):
    data = tmp_path / "data"
    serve = Serve(data, free_port())
    deadline = time.monotonic() + 60
    while not (data / "postgres" / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    serve.process.send_signal(signal.SIGTERM)  # during migrate / seeding
    serve.process.wait(60)
    time.sleep(0.5)
    assert processes_using(data) == [], "".join(serve.lines)


def test_serve_starts_healthy_on_a_fresh_data_dir_stops_leaving_nothing_and_restarts(tmp_path):
    """A fresh data dir: up, healthy, signed in, a clean stop on Ctrl-C; then a second start
    on the same dir reuses it (no re-init, the demo user kept) and stops on SIGTERM."""
    data = tmp_path / "data"
    assert not data.exists()
    port = free_port()
    serve = Serve(data, port)
    try:
        serve.wait_for(r"Agent Platform is up at", timeout=120)
        assert "demo" in serve.wait_for(r"Log in as", timeout=5)
        base = f"http://127.0.0.1:{port}"
        status, body = wait_healthy(base)
        report = json.loads(body)
        assert status == 200, report
        assert all(report["checks"][name]["ok"] for name in ("database", "redis", "worker"))

        status, body = get(f"{base}/login/")
        assert status == 200 and b'name="password"' in body

        # MCP's challenge and resource metadata name the URL the client used (MCP_RESOURCE_URL
        # unset): 127.0.0.1 and the port served, not localhost:8000.
        try:
            urllib.request.urlopen(f"{base}/mcp", timeout=15)
            pytest.fail("/mcp answered without a key")
        except urllib.error.HTTPError as challenge:
            assert challenge.code == 401
            assert (
                f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
                in challenge.headers["WWW-Authenticate"]
            )
        _, metadata = get(f"{base}/.well-known/oauth-protected-resource/mcp")
        assert json.loads(metadata)["resource"] == f"{base}/mcp"
        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        _, page = get(f"{base}/login/", opener)
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
        form = f"csrfmiddlewaretoken={token}&username=demo&password=demo-pass-123".encode()
        request = urllib.request.Request(f"{base}/login/", data=form, headers={"Referer": base})
        with opener.open(request, timeout=15) as response:
            assert response.url.endswith("/t/demo/")
            assert b"Demo" in response.read()

        # Once up, serve is its light supervisor (agentplatform.supervisor): no Django held.
        supervisor = psutil.Process(serve.process.pid)
        assert "agentplatform.supervisor" in " ".join(supervisor.cmdline())
        assert supervisor.memory_info().rss < 60 * 2**20, supervisor.memory_info()
        tree = supervisor.children(recursive=True)
        # Forked from one loaded platform (agentplatform/preload.py), the children share its
        # pages: a worker's PSS is about half its RSS (0.8 when each loaded its own copy).
        workers = [
            c for c in supervisor.children() if "agentplatform worker" in " ".join(c.cmdline())
        ]
        assert len(workers) == 2, [c.cmdline() for c in supervisor.children()]
        for worker in workers:
            rollup = smaps_rollup(worker.pid)
            assert rollup["Pss"] < 0.7 * rollup["Rss"], rollup
        postgres_pid = int((data / "postgres" / "postmaster.pid").read_text().split()[0])
        redis_pid = int((data / "redis" / "redis.pid").read_text())
        watched = [*tree, psutil.Process(postgres_pid), psutil.Process(redis_pid)]
        assert len(tree) >= 2  # uvicorn and the worker (and its pool)
    finally:
        os.killpg(serve.process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        try:
            serve.process.wait(60)
        except subprocess.TimeoutExpired:
            serve.process.kill()
            pytest.fail("serve did not stop within 60 s")
    assert serve.process.returncode == 0, "".join(serve.lines)
    assert "Stopped." in "".join(serve.lines)
    _gone, alive = psutil.wait_procs(watched, timeout=10)
    assert alive == [], f"left running: {alive}"

    port = free_port()
    serve = Serve(data, port)
    try:
        serve.wait_for(r"Agent Platform is up at", timeout=120)
        assert get(f"http://127.0.0.1:{port}/login/")[0] == 200
        assert wait_healthy(f"http://127.0.0.1:{port}")[0] == 200
    finally:
        serve.process.send_signal(signal.SIGTERM)
        serve.process.wait(60)
    assert serve.process.returncode == 0, "".join(serve.lines)
    assert "DEMO_PASSWORD" in "".join(serve.lines)  # existing user, password from env
