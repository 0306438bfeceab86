"""Facts that expire: an agent's retention (`memory_retention_days`) sets each new fact's
`expires_at`; recall never reads an expired fact (scopes.py), and the periodic
`agents.purge_expired_facts` task deletes them, in batches, audited per tenant."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agents.memory.audit import record_expired
from agents.memory.scopes import MemorySettings
from agents.models import Fact

PURGE_BATCH = 1000


def expires_at(settings: MemorySettings, now: datetime | None = None) -> datetime | None:
    """When a fact remembered now by the agent expires; None: kept."""
    if not settings.retention_days:
        return None
    return (now or timezone.now()) + timedelta(days=settings.retention_days)


def facts_expired_purge(*, batch: int = PURGE_BATCH, now: datetime | None = None) -> int:
    """Delete the facts expired by `now`, `batch` at a time (each batch one transaction:
    rows locked and skipped by a concurrent purge, deleted, one audit entry per tenant).
    Returns how many went. Runs as the owner login, across tenants (a housekeeping task)."""
    now = now or timezone.now()
    purged = 0
    while True:
        with transaction.atomic():
            rows = list(
                Fact.objects.filter(expires_at__lte=now)
                .order_by("expires_at", "id")
                .select_for_update(skip_locked=True)
                .values_list("pk", "tenant_id")[:batch]
            )
            if not rows:
                return purged
            by_tenant: dict[int, list[int]] = defaultdict(list)
            for pk, tenant_id in rows:
                by_tenant[tenant_id].append(pk)
            Fact.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
            for tenant_id, ids in by_tenant.items():
                record_expired(tenant_id, ids)
        purged += len(rows)
        if len(rows) < batch:
            return purged
