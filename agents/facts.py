"""The memory tools' store (Fact rows, always filtered by tenant and user), and memory as
a tool source: an `agentplatform.tool_sources` plug-in (pyproject.toml) that gives an agent
whose `memory` is on the tools to remember, recall and forget facts about its user."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from agents.models import Agent, Fact
from agents.runtime.memory import MEMORY_TOOL_NAMES, memory_tools
from tools.runtime.tool import Tool


class DjangoFactStore:
    """Facts in PostgreSQL; a fact remembers the run that learnt it (the RunContext's)."""

    async def remember(self, *, tenant_id, user_id, text, run_id) -> str:
        source = int(run_id) if run_id is not None and str(run_id).isdigit() else None
        fact = await Fact.objects.acreate(
            tenant_id=tenant_id, user_id=user_id, text=text, source_run_id=source
        )
        return str(fact.pk)

    async def recall(self, *, tenant_id, user_id, query, limit) -> list[dict[str, str]]:
        facts = Fact.objects.filter(tenant_id=tenant_id, user_id=user_id)
        for word in query.split()[:5]:
            facts = facts.filter(text__icontains=word)
        rows = await sync_to_async(list)(facts.order_by("-id").values_list("pk", "text")[:limit])
        return [{"id": str(pk), "text": text} for pk, text in rows]

    async def forget(self, *, tenant_id, user_id, fact_id) -> bool:
        if not str(fact_id).isdigit():
            return False
        deleted, _ = await Fact.objects.filter(
            pk=int(fact_id), tenant_id=tenant_id, user_id=user_id
        ).adelete()
        return bool(deleted)


_MEMORY_TOOLS = memory_tools(DjangoFactStore())  # the store keeps nothing per run: share them


def memory_tools_for_agent(agent: Agent) -> list[Tool]:
    """The memory tools, for an agent that remembers (its `memory` setting)."""
    return list(_MEMORY_TOOLS) if agent.memory else []


memory_tools_for_agent.label = "memory"  # type: ignore[attr-defined]
memory_tools_for_agent.tool_names = MEMORY_TOOL_NAMES  # type: ignore[attr-defined]
