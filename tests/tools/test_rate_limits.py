"""The platform's tool rate limiter (tools/rate_limits.py): counts in the real Redis, shared by
every process, per tenant; and every path's RunContext carries it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from django.conf import settings

from agents.runs import tool_run
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_tool
from tools.rate_limits import TOOL_RATE_LIMITER
from tools.runtime.rate_limit import RateLimited
from tools.services import tool_context

SIX_BY_SEVEN = {"expression": "6*7"}
# A child process calling acme's `calc` directly, as a web or worker process would.
CHILD = """
import json, django
django.setup()
from tenancy.models import Tenant
from agents.runs import tool_run
tenant = Tenant.objects.get(pk={tenant_id})
errors = [
    tool_run(tenant=tenant, name="calc", arguments={{"expression": "6*7"}}).error
    for _ in range({calls})
]
print(json.dumps(errors))
"""


def test_every_paths_context_counts_in_redis(trio):
    """The agent runs and the direct calls (REST, MCP, the test pages, self-tests, verifiers)
    all make their RunContext with tool_context."""
    assert tool_context(tenant=trio.acme).rate_limiter is TOOL_RATE_LIMITER


def test_the_count_is_per_tenant_and_tool_and_says_when_the_window_closes(trio):
    async def take(tenant, tool: str) -> RateLimited | None:
        return await TOOL_RATE_LIMITER.take(tenant.pk, tool, 2)

    async def go() -> list:
        return [
            await take(trio.acme, "calc"),
            await take(trio.acme, "calc"),
            await take(trio.acme, "calc"),
            await take(trio.globex, "calc"),
            await take(trio.acme, "other"),
        ]

    first, second, third, globex, other = asyncio.run(go())
    assert first is second is globex is other is None
    assert third.tool == "calc" and third.limit == 2 and 58 <= third.retry_after_s <= 60


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_two_other_processes_and_this_one_share_one_count(trio):
    make_tool(trio.acme, "calc", rate_limit_per_minute=5)
    make_tool(trio.globex, "calc", rate_limit_per_minute=5)
    script = CHILD.format(tenant_id=trio.acme.pk, calls=4)
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    children = [
        processes.spawn(
            [sys.executable, "-c", script], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    errors = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        errors += json.loads(out.strip().splitlines()[-1])
    assert len(errors) == 8 and errors.count(None) == 5  # 5 of the 8 ran, whoever made them
    refused = [e for e in errors if e is not None]
    assert all(e.startswith("tool calc is limited to 5 calls per minute") for e in refused)
    here = tool_run(tenant=trio.acme, name="calc", arguments=SIX_BY_SEVEN)
    assert here.error.startswith("tool calc is limited") and here.result is None  # here too
    theirs = tool_run(tenant=trio.globex, name="calc", arguments=SIX_BY_SEVEN)
    assert theirs.error is None and theirs.result == {"result": 42}
