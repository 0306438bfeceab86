"""Start-up checks (agentplatform/startup_checks.py): a web or worker process given other
FIELD_ENCRYPTION_KEYS than those that encrypted the stored secrets refuses to start, saying
so, instead of failing runs later."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.test import override_settings

from agentplatform.startup_checks import StartupCheckFailed, check_encryption_keys
from providers.models import ProviderConnection
from tests.conftest import ROOT, subprocess_env
from tests.live_server import asgi_server, free_port

SECRET = "sk-startup-check-secret"
OTHER_KEY = Fernet.generate_key().decode()

pytestmark = pytest.mark.django_db(transaction=True)  # the checks read on their own connection


@pytest.fixture
def stored_secret(trio) -> ProviderConnection:
    return ProviderConnection.objects.create(
        tenant=trio.acme, name="Stored", kind="openai", api_key=SECRET, default_model="m"
    )


def test_an_empty_database_passes():
    check_encryption_keys()
    with override_settings(FIELD_ENCRYPTION_KEYS=[OTHER_KEY]):
        check_encryption_keys()  # nothing stored: nothing to disagree with


def test_the_right_keys_pass_and_a_new_key_in_front_passes_too(stored_secret):
    check_encryption_keys()
    with override_settings(FIELD_ENCRYPTION_KEYS=[OTHER_KEY, *settings.FIELD_ENCRYPTION_KEYS]):
        check_encryption_keys()  # mid-rotation: the old key still decrypts


def test_other_keys_fail_naming_the_setting_and_the_column_never_a_key(stored_secret):
    with (
        override_settings(FIELD_ENCRYPTION_KEYS=[OTHER_KEY]),
        pytest.raises(StartupCheckFailed) as failure,
    ):
        check_encryption_keys()
    message = str(failure.value)
    assert "FIELD_ENCRYPTION_KEYS" in message
    assert "providers.ProviderConnection.api_key" in message
    for leaked in (SECRET, OTHER_KEY, *settings.FIELD_ENCRYPTION_KEYS):
        assert leaked not in message


def worker_command(queue: str) -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "agentplatform", "worker",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--pool", "solo",
        "-n", f"startup-{queue}@%h", "-Q", queue, "--loglevel", "WARNING",
    ]  # fmt: skip


def assert_refused(result: subprocess.CompletedProcess) -> None:
    assert result.returncode != 0
    assert "cannot be decrypted with FIELD_ENCRYPTION_KEYS" in result.stderr
    assert "Refusing to start" in result.stderr
    assert "Traceback" not in result.stderr
    for leaked in (SECRET, OTHER_KEY, *settings.FIELD_ENCRYPTION_KEYS):
        assert leaked not in result.stderr


@pytest.mark.integration
def test_a_worker_with_other_keys_exits_and_with_the_right_ones_serves(stored_secret):
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    queue = f"startup-{uuid.uuid4().hex[:8]}"
    refused = subprocess.run(
        worker_command(queue),
        env={**env, "FIELD_ENCRYPTION_KEYS": OTHER_KEY},
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert_refused(refused)

    from agentplatform.tasks import ping

    worker = subprocess.Popen(worker_command(queue), env=env, cwd=ROOT)
    try:
        assert ping.apply_async(queue=queue, expires=30).get(timeout=30) == "pong"
    finally:
        worker.terminate()
        worker.wait(15)


@pytest.mark.integration
def test_a_web_process_with_other_keys_exits_and_with_the_right_ones_serves(stored_secret):
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    started = time.monotonic()
    refused = subprocess.run(
        [
            sys.executable, "-m", "uvicorn", "agentplatform.asgi:application",
            "--host", "127.0.0.1", "--port", str(free_port()),
            "--lifespan", "on", "--timeout-graceful-shutdown", "5",
        ],
        env={**env, "FIELD_ENCRYPTION_KEYS": OTHER_KEY},
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert_refused(refused)
    assert time.monotonic() - started < 30  # at start, not at the first run

    import httpx2

    with asgi_server() as base:  # the right keys (the session's)
        assert httpx2.get(f"{base}/login/", timeout=10).status_code == 200
