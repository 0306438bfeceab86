"""The memory tools' store: Fact rows in PostgreSQL, each call confined to the run's reach
(scopes.py) and bound to one agent's memory settings. A fact remembers the run that wrote
it and its agent; its expiry is the agent's retention (expiry.py). Remembering and
forgetting are audited (audit.py)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import transaction

from agents.memory import recall as recalling
from agents.memory.audit import record_fact
from agents.memory.expiry import expires_at
from agents.memory.scopes import MemorySettings, Reach, reach_of
from agents.models import Fact, Run
from tenancy.models import AuditAction
from tools.runtime.context import RunContext


class DjangoFactStore:
    """Facts as one agent's runs keep them (`settings`); keeps nothing per run."""

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings

    @property
    def _actor(self) -> str:
        return f"agent {self.settings.agent_slug}" if self.settings.agent_slug else "agent"

    def serves(self, ctx: RunContext) -> bool:
        return reach_of(self.settings, ctx) is not None

    def _reach(self, ctx: RunContext) -> Reach:
        reach = reach_of(self.settings, ctx)
        if reach is None:  # (the tools check `serves` first)
            raise PermissionError("this run has no memory")
        return reach

    async def remember(self, *, ctx: RunContext, text: str) -> str:
        """One embedding (outside any transaction), one insert and its audit entry."""
        reach = self._reach(ctx)
        run_id = int(ctx.run_id) if ctx.run_id is not None and str(ctx.run_id).isdigit() else None
        found = await recalling.embedded([text])
        fact = Fact(
            **reach.writes(),
            text=text,
            expires_at=expires_at(self.settings),
            embedding=found[1][0] if found else None,
            embedder=found[0] if found else "",
        )
        await sync_to_async(self._insert)(fact, run_id)
        return str(fact.pk)

    def _insert(self, fact: Fact, run_id: int | None) -> None:
        with transaction.atomic():
            # A run id that is no run of the tenant's (a library caller's own) is no source.
            if (
                run_id is not None
                and Run.objects.filter(pk=run_id, tenant_id=fact.tenant_id).exists()
            ):
                fact.source_run_id = run_id
            fact.save(force_insert=True)
            record_fact(fact, AuditAction.FACT_REMEMBERED, actor=self._actor)

    async def recall(self, *, ctx: RunContext, query: str, limit: int) -> list[dict[str, str]]:
        return await recalling.recall(self._reach(ctx), query, limit)

    async def forget(self, *, ctx: RunContext, fact_id: str) -> bool:
        """Delete one fact the run reaches, audited; False when it reaches none of that id."""
        if not str(fact_id).isdigit():
            return False
        reach = self._reach(ctx)
        return await sync_to_async(self._delete)(reach, int(fact_id), ctx.run_id)

    def _delete(self, reach: Reach, fact_id: int, run_id: str | None) -> bool:
        with transaction.atomic():
            fact = Fact.objects.filter(reach.q(), pk=fact_id).select_for_update().first()
            if fact is None:
                return False
            record_fact(fact, AuditAction.FACT_FORGOTTEN, actor=self._actor, by_run=run_id)
            fact.delete()
        return True
