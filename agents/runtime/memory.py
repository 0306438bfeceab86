"""Memory tools: remembered facts, whose they are decided by the store from the RunContext
(its tenant, its user or API key, its run) and the agent's settings, never by the model.

The model never names a tenant, user, key or scope; the handlers pass the context on.
"""

from __future__ import annotations

from typing import Protocol

from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed, tool


class FactStore(Protocol):
    """Facts a run may remember, recall and forget (the platform's: agents.memory's store,
    bound to an agent's memory settings). `recall` with a query: the facts closest to it by
    meaning or by any of its words, best first; without: the latest. `serves(ctx)`: whether
    a run with this context has a memory at all (a person's, or a key's the agent allows)."""

    def serves(self, ctx: RunContext) -> bool: ...

    async def remember(self, *, ctx: RunContext, text: str) -> str: ...

    async def recall(self, *, ctx: RunContext, query: str, limit: int) -> list[dict[str, str]]: ...

    async def forget(self, *, ctx: RunContext, fact_id: str) -> bool: ...


MEMORY_TOOL_NAMES = ("remember_fact", "recall_facts", "forget_fact")
RECALL_TOP = 10  # facts a query recalls, best first
LATEST = 50  # facts a recall without a query lists, newest first
MAX_FACT_CHARS = 1000


def store_for_run(store: FactStore | None, ctx: RunContext) -> FactStore | None:
    """`store` for a run it serves; None for another, which is offered no memory tools
    (they could only fail)."""
    return store if store is not None and store.serves(ctx) else None


REMEMBER = (
    "Remember a durable fact about the user (a preference, a name, a detail they asked you "
    "to keep) for later conversations. One short sentence per fact."
)


def memory_tools(store: FactStore, *, shared_with: str = "") -> list[Tool]:
    """The three tools over `store`. `shared_with`: who else recalls what is remembered
    (an agent's or a tenant's shared memory), which remember_fact's description tells the
    model, so that it keeps what is private to one person out of it."""
    remembering = REMEMBER
    if shared_with:
        remembering += (
            f" This memory is shared with {shared_with}: never remember anything private "
            "about one person."
        )

    def served(ctx: RunContext) -> None:
        if not store.serves(ctx):
            raise ToolFailed("this run has no memory: it acts for no person")

    @tool(
        description=remembering,
        tags={"memory"},
        capability=Capability(effect=Effect.WRITE, idempotent=False),
    )
    async def remember_fact(fact: str, ctx: RunContext) -> dict:
        served(ctx)
        text = fact.strip()[:MAX_FACT_CHARS]
        if not text:
            raise ToolFailed("the fact is empty")
        fact_id = await store.remember(ctx=ctx, text=text)
        return {"id": fact_id, "remembered": text}

    @tool(tags={"memory"}, capability=Capability(effect=Effect.READ))
    async def recall_facts(ctx: RunContext, query: str = "") -> dict:
        """Recall facts remembered about the user: with a query (words or a question), the
        ones closest to it, best first; without, the latest."""
        served(ctx)
        limit = RECALL_TOP if query.strip() else LATEST
        return {"facts": await store.recall(ctx=ctx, query=query, limit=limit)}

    @tool(tags={"memory"}, capability=Capability(effect=Effect.WRITE))
    async def forget_fact(fact_id: str, ctx: RunContext) -> dict:
        """Forget a remembered fact by its id (from recall_facts)."""
        served(ctx)
        if not await store.forget(ctx=ctx, fact_id=fact_id):
            raise ToolFailed(f"no fact {fact_id!r} to forget")
        return {"forgotten": fact_id}

    return [remember_fact, recall_facts, forget_fact]
