"""Memory tools: facts about the user, scoped by the RunContext to tenant + user.

The model never names a tenant or user; the handlers take both from the context.
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed, tool


class FactStore(Protocol):
    async def remember(
        self, *, tenant_id: Any, user_id: Any, text: str, run_id: str | None
    ) -> str: ...

    async def recall(
        self, *, tenant_id: Any, user_id: Any, query: str, limit: int
    ) -> list[dict[str, str]]: ...

    async def forget(self, *, tenant_id: Any, user_id: Any, fact_id: str) -> bool: ...


class MemoryFactStore:
    """In-process facts, for runtime tests."""

    def __init__(self) -> None:
        self.facts: dict[str, tuple[Any, Any, str]] = {}
        self._ids = itertools.count(1)

    async def remember(self, *, tenant_id, user_id, text, run_id) -> str:
        fact_id = str(next(self._ids))
        self.facts[fact_id] = (tenant_id, user_id, text)
        return fact_id

    async def recall(self, *, tenant_id, user_id, query, limit) -> list[dict[str, str]]:
        words = [w for w in query.lower().split() if w]
        found = [
            {"id": fact_id, "text": text}
            for fact_id, (tenant, user, text) in self.facts.items()
            if (tenant, user) == (tenant_id, user_id)
            and (not words or any(w in text.lower() for w in words))
        ]
        return found[:limit]

    async def forget(self, *, tenant_id, user_id, fact_id) -> bool:
        fact = self.facts.get(fact_id)
        if fact is None or fact[:2] != (tenant_id, user_id):
            return False
        del self.facts[fact_id]
        return True


MEMORY_TOOL_NAMES = ("remember_fact", "recall_facts", "forget_fact")


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
        """Recall facts remembered about the user; an optional query filters them."""
        tenant_id, user_id = who(ctx)
        facts = await store.recall(tenant_id=tenant_id, user_id=user_id, query=query, limit=50)
        return {"facts": facts}

    @tool(tags={"memory"}, capability=Capability(effect=Effect.WRITE))
    async def forget_fact(fact_id: str, ctx: RunContext) -> dict:
        """Forget a remembered fact by its id (from recall_facts)."""
        tenant_id, user_id = who(ctx)
        if not await store.forget(tenant_id=tenant_id, user_id=user_id, fact_id=fact_id):
            raise ToolFailed(f"no fact {fact_id!r} to forget")
        return {"forgotten": fact_id}

    return [remember_fact, recall_facts, forget_fact]
