"""The data life's tasks: the periodic retention purge and export expiry (the beat's
schedule: agentplatform/settings.py), and a workspace archive's build (batch queue)."""

from __future__ import annotations

from celery import shared_task

from lifecycle.export_builds import export_build, exports_expire
from lifecycle.retention import retention_purge
from tenancy import rls


@shared_task(name="lifecycle.purge_retention", ignore_result=True)
def purge_retention() -> int:
    """Every tenant's data past its retention, purged in batches; how many tenants lost some."""
    return sum(1 for purged in retention_purge().values() if purged.batches)


@shared_task(
    name="lifecycle.build_tenant_export",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def build_tenant_export(export_id: int, tenant_id: int) -> str:
    """A workspace's archive (lifecycle.export_builds.export_build: a second delivery finds
    it built, or starts it over)."""
    with rls.tenant_scope(tenant_id):
        return export_build(export_id)


@shared_task(name="lifecycle.expire_tenant_exports", ignore_result=True)
def expire_tenant_exports() -> int:
    """Workspace archives past their time: file and row deleted (hourly, every tenant)."""
    with rls.owner():
        return exports_expire()
