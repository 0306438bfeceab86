"""The data life's periodic tasks (the beat's schedule: agentplatform/settings.py)."""

from __future__ import annotations

from celery import shared_task

from lifecycle.retention import retention_purge


@shared_task(name="lifecycle.purge_retention", ignore_result=True)
def purge_retention() -> int:
    """Every tenant's data past its retention, purged in batches; how many tenants lost some."""
    return sum(1 for purged in retention_purge().values() if purged.batches)
