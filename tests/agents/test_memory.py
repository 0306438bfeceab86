"""Memory tools (agents/runtime/memory.py) through the agent loop, scoped to tenant + user.

alice and bob share tenant 1; a second tenant also has a user with alice's id.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents.runtime.loop import run_agent
from agents.runtime.memory import MEMORY_TOOL_NAMES, MemoryFactStore
from agents.runtime.spec import AgentSpec, RunStatus
from providers.runtime.fake import FakeModel
from providers.runtime.types import ToolResultMessage
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall

ALICE = RunContext(tenant_id=1, user_id="alice", run_id="run_a")
BOB = RunContext(tenant_id=1, user_id="bob", run_id="run_b")
ALICE_ELSEWHERE = RunContext(tenant_id=2, user_id="alice", run_id="run_c")  # same user id
NOBODY = RunContext(tenant_id=1, user_id=None, run_id="run_d")

SPEC = AgentSpec(name="pal", instructions="Be friendly.", model="fake-model", memory=True)


def call_memory_tool(
    store: MemoryFactStore, ctx: RunContext, name: str, arguments: dict[str, Any]
) -> ToolResultMessage:
    """Run the loop with a model that calls one memory tool, then answers; return the
    tool result the model saw."""
    model = FakeModel([ToolCall("m1", name, arguments), "ok"])
    outcome = asyncio.run(
        run_agent(
            spec=SPEC,
            adapter=model,
            registry=ToolRegistry(),
            ctx=ctx,
            input="remember this",
            facts=store,
        )
    )
    assert outcome.status is RunStatus.SUCCEEDED
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolResultMessage) and result.call_id == "m1"
    return result


def recalled(store: MemoryFactStore, ctx: RunContext, query: str = "") -> list[dict[str, str]]:
    result = call_memory_tool(store, ctx, "recall_facts", {"query": query})
    assert not result.is_error, result.content
    return json.loads(result.content)["facts"]


@pytest.fixture
def store() -> MemoryFactStore:
    return MemoryFactStore()


def test_memory_tools_are_offered_only_when_memory_is_on(store):
    model = FakeModel(["hi", "hi"])
    for memory in (True, False):
        spec = AgentSpec(name="pal", instructions="", model="fake-model", memory=memory)
        asyncio.run(
            run_agent(
                spec=spec,
                adapter=model,
                registry=ToolRegistry(),
                ctx=ALICE,
                input="hi",
                facts=store,
            )
        )
    with_memory, without = ({t.name for t in r.tools} for r in model.requests)
    assert with_memory == set(MEMORY_TOOL_NAMES)
    assert without == set()


def test_remember_recall_and_forget_through_the_loop(store):
    result = call_memory_tool(store, ALICE, "remember_fact", {"fact": "  Prefers green tea "})

    assert not result.is_error
    saved = json.loads(result.content)
    assert saved["remembered"] == "Prefers green tea"
    assert store.facts == {saved["id"]: (1, "alice", "Prefers green tea")}
    call_memory_tool(store, ALICE, "remember_fact", {"fact": "Lives in Lyon"})

    assert recalled(store, ALICE, "tea") == [{"id": saved["id"], "text": "Prefers green tea"}]
    assert len(recalled(store, ALICE)) == 2

    forgotten = call_memory_tool(store, ALICE, "forget_fact", {"fact_id": saved["id"]})
    assert not forgotten.is_error
    assert [f["text"] for f in recalled(store, ALICE)] == ["Lives in Lyon"]


@pytest.mark.parametrize("outsider", [BOB, ALICE_ELSEWHERE], ids=["other-user", "other-tenant"])
def test_another_user_or_tenant_cannot_recall_or_forget_a_fact(store, outsider):
    saved = call_memory_tool(store, ALICE, "remember_fact", {"fact": "Allergic to peanuts"})
    fact_id = json.loads(saved.content)["id"]

    assert recalled(store, outsider) == []
    assert recalled(store, outsider, "peanuts") == []
    refused = call_memory_tool(store, outsider, "forget_fact", {"fact_id": fact_id})

    assert refused.is_error
    assert refused.content == f"no fact {fact_id!r} to forget"
    assert [f["text"] for f in recalled(store, ALICE)] == ["Allergic to peanuts"]


def test_each_user_recalls_only_their_own_facts(store):
    call_memory_tool(store, ALICE, "remember_fact", {"fact": "alice likes tea"})
    call_memory_tool(store, BOB, "remember_fact", {"fact": "bob likes coffee"})
    call_memory_tool(store, ALICE_ELSEWHERE, "remember_fact", {"fact": "other alice likes juice"})

    assert [f["text"] for f in recalled(store, ALICE, "likes")] == ["alice likes tea"]
    assert [f["text"] for f in recalled(store, BOB, "likes")] == ["bob likes coffee"]
    assert [f["text"] for f in recalled(store, ALICE_ELSEWHERE)] == ["other alice likes juice"]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("remember_fact", {"fact": "Prefers tea"}),
        ("recall_facts", {}),
        ("forget_fact", {"fact_id": "1"}),
    ],
)
def test_memory_tools_fail_for_a_run_without_a_user(store, name, arguments):
    result = call_memory_tool(store, NOBODY, name, arguments)

    assert result.is_error
    assert result.content == "memory is per user, and this run has no user"
    assert store.facts == {}


def test_an_empty_fact_is_refused(store):
    result = call_memory_tool(store, ALICE, "remember_fact", {"fact": "   "})
    assert result.is_error and result.content == "the fact is empty"
    assert store.facts == {}
