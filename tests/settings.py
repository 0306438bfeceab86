"""Test settings: the real settings (real Postgres and Redis) plus a test-only app."""

import os
import uuid

# One set of Celery queues per test session, inherited by worker subprocesses, so a
# `make run` sharing the same embedded Redis never takes the tests' tasks (or the reverse).
os.environ.setdefault("AP_TEST_QUEUE", f"test-{uuid.uuid4().hex[:8]}")
os.environ["CELERY_QUEUE_PREFIX"] = os.environ["AP_TEST_QUEUE"] + "-"

from agentplatform.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.scoping"]  # noqa: F405
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only

CACHES["default"]["KEY_PREFIX"] = os.environ["AP_TEST_QUEUE"]  # noqa: F405
# One test database per session too: sessions running side by side (or a `make run` and a
# `make test`) on the same embedded Postgres never drop each other's database.
DATABASES["default"]["TEST"] = {"NAME": f"test_agentplatform_{os.environ['AP_TEST_QUEUE'][5:]}"}  # noqa: F405
