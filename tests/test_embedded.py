"""Embedded Postgres and Redis recover from what crashes leave behind."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import psutil
import pytest

from agentplatform import embedded
from agentplatform.embedded import EmbeddedRedis
from tests.conftest import ROOT


@pytest.mark.integration
def test_a_stale_redis_pid_file_naming_another_program_is_ignored_not_killed(tmp_path):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server = EmbeddedRedis(tmp_path)
        server.pidfile.write_text(str(bystander.pid))  # as if Redis died and the pid was reused
        server.socket.touch()
        server.acquire()
        assert server.running() and server._pid() != bystander.pid
        server.release()
        assert not server.running()
        assert bystander.poll() is None  # untouched
    finally:
        bystander.kill()
        bystander.wait()


def _hold_postgres(data_dir, *, then: str) -> subprocess.Popen:
    code = (
        f"import sys, os, signal, time; sys.path.insert(0, {str(ROOT)!r})\n"
        "from pathlib import Path\nfrom agentplatform import embedded\n"
        f"embedded.postgres(Path({str(data_dir)!r})); print('up', flush=True)\n{then}\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _postmaster_pid(data_dir) -> int:
    return int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])


@pytest.mark.integration
def test_postgres_is_stopped_by_the_last_holder_even_after_a_holder_died(tmp_path):
    killed = _hold_postgres(tmp_path, then="time.sleep(60)")
    assert killed.stdout.readline().strip() == "up"
    postgres_pid = _postmaster_pid(tmp_path)
    killed.kill()  # no atexit: its handle stays in .handle_pids.json
    killed.wait()
    handles = json.loads((tmp_path / "postgres" / ".handle_pids.json").read_text())
    assert killed.pid in handles
    clean = _hold_postgres(tmp_path, then="")
    assert clean.stdout.readline().strip() == "up"
    assert clean.wait(30) == 0
    deadline = time.monotonic() + 10
    while psutil.pid_exists(postgres_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(postgres_pid) or (
        psutil.Process(postgres_pid).status() == psutil.STATUS_ZOMBIE
    )


def test_the_key_file_and_redis_folder_are_the_platforms_only(tmp_path):
    """A remote agent's command, run as another account, must not read them (docs/security.md)."""
    old = os.umask(0)  # whatever the umask
    try:
        made = embedded.local_secrets(tmp_path / "fresh")
        redis = EmbeddedRedis(tmp_path / "fresh").dir
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh" / "local-secrets.json").stat().st_mode) == 0o600
    assert set(made) == {"SECRET_KEY", "FIELD_ENCRYPTION_KEYS"}
    assert stat.S_IMODE(redis.stat().st_mode) == 0o700

    # One found readable by others (copied, or written by hand) is made the owner's again.
    copied = tmp_path / "copied" / "local-secrets.json"
    copied.parent.mkdir()
    copied.write_text(json.dumps(made))
    copied.chmod(0o644)
    assert embedded.local_secrets(copied.parent) == made
    assert stat.S_IMODE(copied.stat().st_mode) == 0o600
