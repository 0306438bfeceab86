"""Memory tools: facts about the user, scoped by the RunContext to tenant + user.

The model never names a tenant or user; the handlers take both from the context.
"""

from __future__ import annotations

from typing import Any, Protocol

from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed, tool


class FactStore(Protocol):
    """Facts per tenant and user (the platform's: agents.facts.DjangoFactStore). `recall`
    with a query: the facts closest to it by meaning or by any of its words, best first;
    without: the latest."""

    async def remember(
        self, *, tenant_id: Any, user_id: Any, text: str, run_id: str | None
    ) -> str: ...

    async def recall(
        self, *, tenant_id: Any, user_id: Any, query: str, limit: int
    ) -> list[dict[str, str]]: ...

    async def forget(self, *, tenant_id: Any, user_id: Any, fact_id: str) -> bool: ...


MEMORY_TOOL_NAMES = ("remember_fact", "recall_facts", "forget_fact")
RECALL_TOP = 10  # facts a query recalls, best first
LATEST = 50  # facts a recall without a query lists, newest first


def store_for_run(store: FactStore | None, ctx: RunContext) -> FactStore | None:
    """`store` for a run with a user; None for one without, which is offered no memory
    tools (they could only fail: facts are a user's)."""
    return store if ctx.user_id is not None else None


def memory_tools(store: FactStore) -> list[Tool]:
    def who(ctx: RunContext) -> tuple[Any, Any]:
        if ctx.user_id is None:
            raise ToolFailed("memory is per user, and this run has no user")
        return ctx.tenant_id, ctx.user_id

    @tool(tags={"memory"}, capability=Capability(effect=Effect.WRITE, idempotent=False))
    async def remember_fact(fact: str, ctx: RunContext) -> dict:
        """Remember a durable fact about the user (a preference, a name, a detail they
        asked you to keep) for later conversations. One short sentence per fact."""
        tenant_id, user_id = who(ctx)
        if not fact.strip():
            raise ToolFailed("the fact is empty")
        fact_id = await store.remember(
            tenant_id=tenant_id, user_id=user_id, text=fact.strip()[:1000], run_id=ctx.run_id
        )
        return {"id": fact_id, "remembered": fact.strip()[:1000]}

    @tool(tags={"memory"}, capability=Capability(effect=Effect.READ))
    async def recall_facts(ctx: RunContext, query: str = "") -> dict:
        """Recall facts remembered about the user: with a query (words or a question), the
        ones closest to it, best first; without, the latest."""
        tenant_id, user_id = who(ctx)
        limit = RECALL_TOP if query.strip() else LATEST
        facts = await store.recall(tenant_id=tenant_id, user_id=user_id, query=query, limit=limit)
        return {"facts": facts}

    @tool(tags={"memory"}, capability=Capability(effect=Effect.WRITE))
    async def forget_fact(fact_id: str, ctx: RunContext) -> dict:
        """Forget a remembered fact by its id (from recall_facts)."""
        tenant_id, user_id = who(ctx)
        if not await store.forget(tenant_id=tenant_id, user_id=user_id, fact_id=fact_id):
            raise ToolFailed(f"no fact {fact_id!r} to forget")
        return {"forgotten": fact_id}

    return [remember_fact, recall_facts, forget_fact]
