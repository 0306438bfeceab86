"""Memory tools through runs of the platform: the memory tool source (agents/memory/) and
the production store on the real PostgreSQL, scoped to the run's tenant and user. The
model is the local fake provider: it calls one memory tool, then answers.

bob is a member of acme and of globex; alice is acme's owner.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from rest_framework.test import APIClient

from agents import runs
from agents.memory import DjangoFactStore, MemorySettings
from agents.models import Fact
from agents.runtime.memory import MEMORY_TOOL_NAMES, memory_tools
from tests.factories import add_member, login, make_agent, make_connection
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall as RuntimeToolCall


@pytest.fixture
def pals(trio, connection, provider_server):
    """An agent that remembers in each tenant; bob belongs to both."""
    add_member(trio.globex, trio.bob)
    make_connection(
        trio.globex, "Local OpenAI", "openai", api_key="sk-test-key",
        base_url=provider_server.openai_base_url, default_model="gpt-test", is_default=True,
        max_retries=0,
    )  # fmt: skip
    return {
        "acme": make_agent(trio.acme, "pal", memory=True),
        "globex": make_agent(trio.globex, "pal", memory=True),
    }


def call_memory_tool(provider_server, agent, user, name: str, arguments: dict[str, Any]) -> dict:
    """A run of `agent` started by `user` whose model calls one memory tool: the call's
    `tool.completed` payload (result or error)."""
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", name, json.dumps(arguments))]),
        TextReply("ok"),
    )
    run = runs.run_inline(
        tenant=agent.tenant, agent=agent, input="remember this", initiated_by=user
    )
    assert run.status == "succeeded", run.error
    return run.events.get(type="tool.completed").payload


def recalled(provider_server, agent, user, query: str = "") -> list[dict[str, str]]:
    payload = call_memory_tool(provider_server, agent, user, "recall_facts", {"query": query})
    assert payload["error"] is None, payload["error"]
    return payload["result"]["facts"]


def offered(provider_server) -> set[str]:
    request = provider_server.requests_to("/v1/chat/completions")[-1]
    return {tool["function"]["name"] for tool in request.body.get("tools", [])}


def test_memory_tools_are_offered_only_when_memory_is_on(trio, pals, provider_server):
    runs.run_inline(tenant=trio.acme, agent=pals["acme"], input="hi", initiated_by=trio.bob)
    assert set(MEMORY_TOOL_NAMES) <= offered(provider_server)

    forgets = make_agent(trio.acme, "forgets", memory=False)
    runs.run_inline(tenant=trio.acme, agent=forgets, input="hi", initiated_by=trio.bob)
    assert not set(MEMORY_TOOL_NAMES) & offered(provider_server)


def test_remember_recall_and_forget_through_runs(trio, pals, provider_server):
    pal = pals["acme"]
    saved = call_memory_tool(
        provider_server, pal, trio.bob, "remember_fact", {"fact": "  Bob likes green tea. "}
    )

    assert saved["error"] is None
    assert saved["result"]["remembered"] == "Bob likes green tea."
    fact = Fact.objects.get(pk=saved["result"]["id"])
    assert (fact.tenant, fact.user, fact.text) == (trio.acme, trio.bob, "Bob likes green tea.")
    call_memory_tool(provider_server, pal, trio.bob, "remember_fact", {"fact": "Lives in Lyon"})

    tea = recalled(provider_server, pal, trio.bob, "tea preferences")  # the example
    assert tea[0] == {"id": str(fact.pk), "text": "Bob likes green tea."}
    assert [f["text"] for f in recalled(provider_server, pal, trio.bob)] == [
        "Lives in Lyon", "Bob likes green tea.",
    ]  # fmt: skip

    forgotten = call_memory_tool(
        provider_server, pal, trio.bob, "forget_fact", {"fact_id": str(fact.pk)}
    )
    assert forgotten["error"] is None
    assert [f["text"] for f in recalled(provider_server, pal, trio.bob)] == ["Lives in Lyon"]


@pytest.mark.parametrize("outsider", ["other-user", "other-tenant"])
def test_another_user_or_tenant_cannot_recall_or_forget_a_fact(
    trio, pals, provider_server, outsider
):
    saved = call_memory_tool(
        provider_server, pals["acme"], trio.bob, "remember_fact", {"fact": "Allergic to peanuts"}
    )
    fact_id = saved["result"]["id"]
    agent, user = {
        "other-user": (pals["acme"], trio.alice),
        "other-tenant": (pals["globex"], trio.bob),  # the same user, in his other tenant
    }[outsider]

    assert recalled(provider_server, agent, user) == []
    assert recalled(provider_server, agent, user, "peanuts allergy") == []
    refused = call_memory_tool(provider_server, agent, user, "forget_fact", {"fact_id": fact_id})

    assert refused["error"] == f"no fact {fact_id!r} to forget"
    assert Fact.objects.filter(pk=fact_id).exists()


def test_each_user_recalls_only_their_own_facts(trio, pals, provider_server):
    for agent, user, text in [
        (pals["acme"], trio.bob, "bob likes tea"),
        (pals["acme"], trio.alice, "alice likes coffee"),
        (pals["globex"], trio.bob, "bob at globex likes juice"),
    ]:
        call_memory_tool(provider_server, agent, user, "remember_fact", {"fact": text})

    for agent, user, own in [
        (pals["acme"], trio.bob, ["bob likes tea"]),
        (pals["acme"], trio.alice, ["alice likes coffee"]),
        (pals["globex"], trio.bob, ["bob at globex likes juice"]),
    ]:
        assert [f["text"] for f in recalled(provider_server, agent, user, "likes drinks")] == own


def test_an_empty_fact_is_refused(trio, pals, provider_server):
    pal = pals["acme"]
    result = call_memory_tool(provider_server, pal, trio.bob, "remember_fact", {"fact": " "})
    assert result["error"] == "the fact is empty"
    assert not Fact.objects.exists()


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("remember_fact", {"fact": "Prefers tea"}),
        ("recall_facts", {}),
        ("forget_fact", {"fact_id": "1"}),
    ],
)
def test_the_memory_tools_themselves_refuse_a_run_without_a_user(trio, name, arguments):
    """Such runs are not offered them (test_memory_offer.py); given them anyway (the pure
    runtime's caller), each call is refused before the store is asked."""
    registry = ToolRegistry(memory_tools(DjangoFactStore(MemorySettings.default())))
    nobody = RunContext(tenant_id=trio.acme.pk, user_id=None, run_id="1")

    result = async_to_sync(registry.execute)(RuntimeToolCall("m1", name, arguments), nobody)

    assert result.error == "this run has no memory: it acts for no person"
    assert not Fact.objects.exists()


def test_a_fact_the_person_deleted_is_never_recalled_by_a_later_run(trio, pals, provider_server):
    """The issue's check: remembered in a run, deleted by its person (REST), then no run
    recalls it — by its words, by its meaning, or among the latest."""
    pal = pals["acme"]
    saved = call_memory_tool(
        provider_server, pal, trio.bob, "remember_fact", {"fact": "Has a beagle named Biscuit."}
    )
    fact_id = saved["result"]["id"]
    assert [f["id"] for f in recalled(provider_server, pal, trio.bob, "pets")] == [fact_id]

    bob = login(APIClient(), trio.bob, tenant="acme")
    assert bob.delete(f"/api/v1/facts/{fact_id}").status_code == 204
    for query in ("beagle Biscuit", "pets", ""):
        assert recalled(provider_server, pal, trio.bob, query) == [], query
