"""Test settings: the real settings (real Postgres and Redis) plus a test-only app."""

import os
import uuid

# One set of Celery queues per test session, inherited by worker subprocesses, so a
# `make run` sharing the same embedded Redis never takes the tests' tasks (or the reverse).
# Under pytest-xdist (`make test`) each worker (PYTEST_XDIST_WORKER: gw0, gw1, ...) is a
# session of its own: it replaces the value the controller passed down, once; the processes
# it starts inherit both variables and keep its value.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if os.environ.get("AP_TEST_QUEUE_OWNER", "") != _XDIST_WORKER:
    os.environ["AP_TEST_QUEUE"] = f"test-{uuid.uuid4().hex[:8]}"
    os.environ["AP_TEST_QUEUE_OWNER"] = _XDIST_WORKER
os.environ.setdefault("AP_TEST_QUEUE", f"test-{uuid.uuid4().hex[:8]}")
os.environ["CELERY_QUEUE_PREFIX"] = os.environ["AP_TEST_QUEUE"] + "-"

from agentplatform import config, embedded  # noqa: E402
from agentplatform.settings import *  # noqa: E402, F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.scoping"]  # noqa: F405
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only

if _XDIST_WORKER and EMBEDDED_REDIS:  # noqa: F405
    # An embedded Redis of its own per xdist worker (beside the shared one, in DATA_DIR):
    # pub/sub channels and the few unprefixed keys (the API keys' version) are
    # server-wide, so workers sharing one would see each other's announcements. Children
    # get its URL in REDIS_URL and take no handle; the worker's exit stops it.
    REDIS_URL = embedded.redis(DATA_DIR / "xdist" / _XDIST_WORKER)  # noqa: F405
    CACHES["default"]["LOCATION"] = REDIS_URL  # noqa: F405
    CELERY_BROKER_URL = config.celery_url(REDIS_URL, db=0)
    CELERY_RESULT_BACKEND = CELERY_BROKER_URL

CACHES["default"]["KEY_PREFIX"] = os.environ["AP_TEST_QUEUE"]  # noqa: F405
# One test database per session too: sessions running side by side (or a `make run` and a
# `make test`) on the same embedded Postgres never drop each other's database.
DATABASES["default"]["TEST"] = {"NAME": f"test_agentplatform_{os.environ['AP_TEST_QUEUE'][5:]}"}  # noqa: F405
# A gateway stream left by its caller is read on this long for its usage (30 s by default):
# what tests of callers leaving wait for.
GATEWAY_STREAM_READ_ON_S = config.env_int("GATEWAY_STREAM_READ_ON_S", 2, minimum=0)
# Attached files: a directory of this session's (its child processes read the same one).
if STORAGES["attachments"]["BACKEND"].endswith("FileSystemStorage"):  # noqa: F405
    STORAGES["attachments"]["OPTIONS"]["location"] = str(  # noqa: F405
        DATA_DIR / "test-attachments" / os.environ["AP_TEST_QUEUE"]  # noqa: F405
    )
