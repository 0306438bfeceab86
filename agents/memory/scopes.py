"""Whose facts a run reads and where it writes them: its `Reach`, from the agent's memory
settings and the run's context (tenant, user or API key). One rule, given twice: as SQL
for the ranking statement (recall.py) and as a Q for the ORM (store.py), kept in step by
tests/agents/test_memory_scopes.py.

- A person's run (a session's, or a key's acting for a member) reads that person's facts;
  never a key's nor another person's.
- A key's run acting for no member has memory only when its agent allows it
  (`memory_key_runs`): the key's own facts, never a person's.
- Besides its own, a run reads the shared facts of its agent's scope: `agent` adds the
  agent's agent-scope facts, `tenant` those and the tenant's. It writes to that scope
  (`person`: to its own, the person's or the key's).
- Expired facts are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.utils import timezone

from agents.models import Agent, FactScope, MemoryScope
from tools.runtime.context import RunContext


@dataclass(frozen=True)
class MemorySettings:
    """An agent's memory settings, as its memory tools are bound to them."""

    agent_id: int | None
    agent_slug: str
    scope: str  # MemoryScope
    retention_days: int | None
    key_runs: bool

    @classmethod
    def default(cls) -> MemorySettings:
        """A new agent's: each person's own memory, kept, none for keys (no agent named:
        a library caller's store, a benchmark's)."""
        return cls(None, "", MemoryScope.PERSON, None, False)

    @classmethod
    def of(cls, agent: Agent) -> MemorySettings:
        return cls(
            agent_id=agent.pk,
            agent_slug=agent.slug,
            scope=agent.memory_scope or MemoryScope.PERSON,
            retention_days=agent.memory_retention_days,
            key_runs=agent.memory_key_runs,
        )


@dataclass(frozen=True)
class Reach:
    tenant_id: int
    user_id: int | None  # a person's run
    api_key_id: int | None  # a key's run acting for no member (its agent allows it)
    agent_id: int | None
    shared: str  # the agent's MemoryScope

    def writes(self) -> dict[str, Any]:
        """The owner fields of a fact this run remembers (its agent's, for provenance)."""
        fields: dict[str, Any] = {"tenant_id": self.tenant_id, "agent_id": self.agent_id}
        if self.shared == MemoryScope.AGENT and self.agent_id is not None:
            return fields | {"scope": FactScope.AGENT}
        if self.shared == MemoryScope.TENANT:
            return fields | {"scope": FactScope.TENANT}
        if self.user_id is not None:
            return fields | {"scope": FactScope.PERSON, "user_id": self.user_id}
        return fields | {"scope": FactScope.KEY, "api_key_id": self.api_key_id}

    def q(self) -> Q:
        """The facts this run may read, unexpired, as a filter of Fact."""
        if self.user_id is not None:
            whose = Q(scope=FactScope.PERSON, user_id=self.user_id)
        else:
            whose = Q(scope=FactScope.KEY, api_key_id=self.api_key_id)
        if self.shared in (MemoryScope.AGENT, MemoryScope.TENANT) and self.agent_id is not None:
            whose |= Q(scope=FactScope.AGENT, agent_id=self.agent_id)
        if self.shared == MemoryScope.TENANT:
            whose |= Q(scope=FactScope.TENANT)
        unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        return Q(tenant_id=self.tenant_id) & unexpired & whose

    def sql(self, alias: str = "f") -> tuple[str, dict[str, Any]]:
        """The same filter as SQL over `alias` (agents_fact), with its named parameters."""
        # The clock is the process's, as q()'s: PostgreSQL's now() is the transaction's start,
        # so a fact expiring during a long transaction would be read on by one form only.
        params: dict[str, Any] = {"reach_tenant": self.tenant_id, "reach_now": timezone.now()}
        if self.user_id is not None:
            whose = [f"({alias}.scope = 'person' AND {alias}.user_id = %(reach_user)s)"]
            params["reach_user"] = self.user_id
        else:
            whose = [f"({alias}.scope = 'key' AND {alias}.api_key_id = %(reach_key)s)"]
            params["reach_key"] = self.api_key_id
        if self.shared in (MemoryScope.AGENT, MemoryScope.TENANT) and self.agent_id is not None:
            whose.append(f"({alias}.scope = 'agent' AND {alias}.agent_id = %(reach_agent)s)")
            params["reach_agent"] = self.agent_id
        if self.shared == MemoryScope.TENANT:
            whose.append(f"{alias}.scope = 'tenant'")
        sql = (
            f"{alias}.tenant_id = %(reach_tenant)s"
            f" AND ({alias}.expires_at IS NULL OR {alias}.expires_at > %(reach_now)s)"
            f" AND ({' OR '.join(whose)})"
        )
        return sql, params


def reach_of(settings: MemorySettings, ctx: RunContext) -> Reach | None:
    """The run's reach; None for a run with no memory: one acting for nobody, or a key's
    whose agent keeps no memory for keys."""
    if ctx.user_id is not None:
        user_id, key_id = int(ctx.user_id), None
    elif ctx.api_key_id is not None and settings.key_runs:
        user_id, key_id = None, int(ctx.api_key_id)
    else:
        return None
    return Reach(
        tenant_id=int(ctx.tenant_id),
        user_id=user_id,
        api_key_id=key_id,
        agent_id=settings.agent_id,
        shared=settings.scope,
    )
