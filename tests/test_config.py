"""Settings fail loudly on bad values, naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentplatform import config
from tests.conftest import ROOT


@pytest.mark.parametrize(
    "raw,expected", [("1", True), ("yes", True), ("off", False), ("FALSE", False)]
)
def test_booleans_accept_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("DEBUG", raw)
    assert config.env_bool("DEBUG", default=not expected) is expected


def test_a_non_boolean_is_refused(monkeypatch):
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DEBUG='maybe'"):
        config.env_bool("DEBUG", default=False)


def test_database_urls(monkeypatch):
    entry = config.database_from_url("DATABASE_URL", "postgres://u:p@db:5433/app?sslmode=require")
    assert (entry["HOST"], entry["PORT"], entry["NAME"], entry["USER"]) == ("db", 5433, "app", "u")
    assert entry["OPTIONS"] == {"sslmode": "require"}
    socket = config.database_from_url("DATABASE_URL", "postgres://u@%2Frun%2Fpg/app")
    assert socket["HOST"] == "/run/pg"
    with pytest.raises(ImproperlyConfigured, match="postgres://"):
        config.database_from_url("DATABASE_URL", "mysql://u@db/app")
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        config.database_from_url("DATABASE_URL", "postgres://u@db")


def test_redis_urls():
    assert config.redis_url("REDIS_URL", "redis://r:6379/0") == "redis://r:6379/0"
    assert (
        config.celery_url("unix:///tmp/r.sock", db=0) == "redis+socket:///tmp/r.sock?virtual_host=0"
    )
    with pytest.raises(ImproperlyConfigured):
        config.redis_url("REDIS_URL", "http://r:6379")


def test_fernet_keys_are_checked_each():
    from cryptography.fernet import Fernet

    good = Fernet.generate_key().decode()
    assert config.fernet_keys("K", f"{good}, {good}") == [good, good]
    with pytest.raises(ImproperlyConfigured, match="key #2"):
        config.fernet_keys("K", f"{good},not-a-key")
    with pytest.raises(ImproperlyConfigured, match="empty"):
        config.fernet_keys("K", " , ")


def test_egress_allowlist_takes_hosts_and_networks():
    assert config.egress_allowlist("E", ["10.0.0.0/8", "api.internal", "::1"]) == [
        "10.0.0.0/8",
        "api.internal",
        "::1",
    ]
    with pytest.raises(ImproperlyConfigured, match="not a valid IP network"):
        config.egress_allowlist("E", ["10.0.0.0/33"])
    with pytest.raises(ImproperlyConfigured):
        config.egress_allowlist("E", ["bad host!"])


def test_integers(monkeypatch):
    monkeypatch.setenv("DB_CONN_MAX_AGE", "ten")
    with pytest.raises(ImproperlyConfigured, match="DB_CONN_MAX_AGE"):
        config.env_int("DB_CONN_MAX_AGE", 60)
    monkeypatch.setenv("SIGN_IN_FAILURES_PER_USER", "0")
    with pytest.raises(ImproperlyConfigured, match="SIGN_IN_FAILURES_PER_USER='0' must be at"):
        config.env_int("SIGN_IN_FAILURES_PER_USER", 5, minimum=1)


def _start_django(**env: str) -> subprocess.CompletedProcess:
    import os

    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    environment.update(env, DJANGO_SETTINGS_MODULE="agentplatform.settings", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "env,message",
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"DATABASE_URL": "postgres://u@db/app"}, "SECRET_KEY must be set"),
        (
            {"DATABASE_URL": "postgres://u@db/app", "SECRET_KEY": "x" * 50},
            "FIELD_ENCRYPTION_KEYS must be set",
        ),
        (
            {
                "DATABASE_URL": "sqlite:///x.db",
                "SECRET_KEY": "x" * 50,
                "FIELD_ENCRYPTION_KEYS": "k",
            },
            "FIELD_ENCRYPTION_KEYS: key #1 is not a Fernet key",
        ),
        ({"REDIS_URL": "http://nope"}, "REDIS_URL must be a redis://"),
        (  # renamed: its value, held but never sent, would silently stop applying
            {"QUOTA_GATEWAY_OUTPUT_ESTIMATE": "512"},
            "QUOTA_GATEWAY_OUTPUT_ESTIMATE is now GATEWAY_DEFAULT_MAX_TOKENS",
        ),
    ],
)
@pytest.mark.integration
def test_bad_environment_stops_start_up_with_the_reason(env, message, tmp_path):
    result = _start_django(DATA_DIR=str(tmp_path), **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr


# A web process's set-up, then what `manage.py check` runs: one child Python for both.
WEB_PROCESS_SETUP_AND_CHECKS = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import django
    django.setup()
    from agentplatform.asgi_handler import StreamingASGIHandler
    StreamingASGIHandler()  # loads the middleware, WhiteNoise among them
from django.core.management import call_command
call_command("check")  # raises SystemCheckError (the child exits 1) on an error
print([str(w.message) for w in caught if "No directory" in str(w.message)])
"""


@pytest.mark.integration
def test_external_services_need_no_writable_data_dir(tmp_path):
    """With DATABASE_URL and REDIS_URL set, DATA_DIR may be missing and uncreatable (under
    a plain file here, which even root cannot make a directory in)."""
    from django.conf import settings

    from tests.conftest import subprocess_env

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {
        **subprocess_env(),
        "DJANGO_SETTINGS_MODULE": "agentplatform.settings",
        "DATA_DIR": str(blocker / "data"),
    }
    assert env["DATABASE_URL"] and env["REDIS_URL"] == settings.REDIS_URL
    web = subprocess.run(
        [sys.executable, "-c", WEB_PROCESS_SETUP_AND_CHECKS],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert web.returncode == 0, web.stderr
    assert "System check identified no issues" in web.stdout
    assert web.stdout.splitlines()[-1] == "[]"  # no WhiteNoise warning about the static root
    assert not (blocker / "data").exists()


@pytest.mark.integration
def test_embedded_services_need_a_writable_data_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _start_django(DATA_DIR=str(blocker / "data"))
    assert result.returncode != 0
    assert (
        f"DATA_DIR={str(blocker / 'data')!r} is not a writable directory (Not a directory); "
        "it holds the embedded PostgreSQL and Redis (DATABASE_URL / REDIS_URL unset). Make it "
        "writable, point DATA_DIR at one that is, or set DATABASE_URL and REDIS_URL."
    ) in result.stderr


def test_the_account_remote_agent_commands_run_as(monkeypatch):
    name = "REMOTE_AGENT_COMMAND_USER"
    monkeypatch.delenv(name, raising=False)
    assert config.command_account(name, "nobody", needed=True) == "nobody"
    monkeypatch.setenv(name, "65534")
    assert config.command_account(name, "nobody", needed=True) == "65534"
    monkeypatch.setenv(name, "agents; rm -rf /")
    with pytest.raises(ImproperlyConfigured, match="is not an account name or uid"):
        config.command_account(name, "nobody", needed=False)
    monkeypatch.setenv(name, "no-such-account-here")
    assert config.command_account(name, "nobody", needed=False) == "no-such-account-here"
    if os.geteuid() == 0:  # switched to only under root: it must exist
        with pytest.raises(ImproperlyConfigured, match="'no-such-account-here': no such account"):
            config.command_account(name, "nobody", needed=True)


@pytest.mark.django_db(transaction=True)
def test_a_burst_grows_a_process_pool_to_five_connections_at_most():
    # Each connection is a PostgreSQL backend of about 4 MB, and a burst (a web process's
    # chats arriving at once) grows a pool to its maximum (bench/footprint.py).
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    def query(_) -> int:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_sleep(0.05)")
                return cursor.fetchone()[0]
        finally:
            connection.close()  # (given back to the pool)

    with ThreadPoolExecutor(12) as burst:
        assert list(burst.map(query, range(24))) == [1] * 24
    assert connection.pool.get_stats()["pool_size"] <= 5
