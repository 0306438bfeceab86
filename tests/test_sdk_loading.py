"""An SDK is loaded by the first call that needs it, not by starting a process: the
anthropic SDK alone cost every web and worker process about a second and 40 MB, the MCP
client every worker about 0.6 s."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, subprocess_env
from tests.factories import make_connection

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]  # a child Python


def run_child(code: str) -> subprocess.CompletedProcess:
    """`code` in a child Python on this session's database and Redis."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


CHILD = """
import sys
import agentplatform.asgi, agentplatform.celery, agents.tasks
from tenancy import rls
from providers.models import ProviderConnection
from providers.services import adapter_for
print("anthropic" in sys.modules, end=" ")
with rls.owner():
    adapter_for(ProviderConnection.objects.get(name="Primary"))
    print("anthropic" in sys.modules, end=" ")
    adapter = adapter_for(ProviderConnection.objects.get(name="Claude"))
print("anthropic" in sys.modules, type(adapter).__name__)
"""


def test_a_process_loads_the_anthropic_sdk_only_for_an_anthropic_connection(trio):
    make_connection(trio.acme, "Primary", "openai", api_key="sk-1")
    make_connection(trio.acme, "Claude", "anthropic", api_key="sk-ant-1")
    out = run_child(CHILD)
    assert out.stdout.split() == ["False", "False", "True", "AnthropicAdapter"], out.stderr[-2000:]


WORKER = """
import sys
import agentplatform.wsgi
from agentplatform.celery import app
app.loader.import_default_modules()  # every task module, as `celery worker` does
print("mcp" in sys.modules, "anthropic" in sys.modules, "agentplatform.urls" in sys.modules,
      "openai" in sys.modules)
"""


def test_a_worker_process_starts_without_the_sdks_or_the_urlconf():
    # The URLconf (every view, DRF, drf-spectacular: 20 MB) came with Django's system checks,
    # which Celery's fixup runs as a worker starts; the deployment's `migrate` runs them.
    # The openai SDK (0.5 s) comes with the first model call (serve's children share it:
    # agentplatform.preload), so a management command never loads it.
    out = run_child(WORKER)
    assert out.stdout.split() == ["False", "False", "False", "False"], out.stderr[-2000:]


WEB = """
import sys
import agentplatform.asgi, agentplatform.urls
print("mcp" in sys.modules, "starlette.applications" in sys.modules)
"""


def test_a_web_process_starts_without_the_mcp_sdk():
    # (the MCP app is made by the first /mcp request: tests/mcp/ call it through a live server)
    out = run_child(WEB)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]


SUPERVISOR = """
import sys
import agentplatform.supervisor, agentplatform.embedded
print("celery" in sys.modules, "django" in sys.modules)
"""


def test_serves_supervisor_loads_neither_celery_nor_django():
    # (the Celery app alone was 17 MB of the supervisor's 24, PSS)
    out = run_child(SUPERVISOR)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
