"""Audit entries of memory (tenancy.records.audit): a fact remembered, edited, forgotten,
and expired facts purged. Never the fact's text — only whose it is, which agent and run
wrote it, and who acted."""

from __future__ import annotations

from typing import Any

from agents.models import Fact
from tenancy.models import AuditAction
from tenancy.records import audit


def whose(fact: Fact) -> dict[str, Any]:
    """The fact's scope and owner, its provenance, its expiry: what an entry may say."""
    return {
        "scope": fact.scope,
        "user": fact.user_id,
        "agent": fact.agent_id,
        "api_key": fact.api_key_id,
        "run": fact.source_run_id,
        "expires_at": fact.expires_at,
    }


def record_fact(fact: Fact, action: AuditAction, *, actor: Any = None, **details: Any) -> None:
    """One entry for one fact (in the caller's transaction). `actor`: the person or key
    that acted, or a label ("agent support")."""
    audit.record(
        tenant=fact.tenant_id, action=action, actor=actor, obj=fact, details=whose(fact) | details
    )


def record_expired(tenant_id: int, fact_ids: list[int]) -> None:
    """One entry for the expired facts of one tenant purged together."""
    audit.record(
        tenant=tenant_id,
        action=AuditAction.FACTS_EXPIRED,
        actor=audit.SYSTEM,
        details={"facts": fact_ids, "count": len(fact_ids)},
    )
