"""An owner's archive of the whole workspace (docs/operations.md, "Offboarding"): asked for
on the page or over REST, built by a worker (`lifecycle.build_tenant_export` on the batch
queue: an archive of a big tenant takes minutes, never a request's time), followed while it
builds, downloaded by owners only, then deleted.

The archive is `lifecycle.export`'s (the `tenant export` command's). It is written to a
temporary file, then stored where attachments are (`storages["attachments"]`, a directory
or a bucket) as `t<tenant id>/exports/<random>.zip`: a tenant's erasure sweeps it with the
rest of `t<id>/`. One export a tenant (`TenantExport`): asking again while one builds
returns it; asking once it is ready or failed replaces it (the old file deleted). A ready
archive is kept `TENANT_EXPORT_KEEP_HOURS` (24) after it was built, downloads included (a
download cut short can be tried again), then the beat's `lifecycle.expire_tenant_exports`
deletes file and row. A build whose worker died (no progress for `TENANT_EXPORT_STALE_S`)
shows as failed and may be asked for again; the task itself is delivered again after a
worker's loss (acks late) and starts over.

Asking and every download are in the audit log (`export.requested`, `export.downloaded`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import IO

from django.conf import settings
from django.core.files.storage import storages
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from lifecycle.export_builds import archive_delete
from lifecycle.models import ExportStatus, TenantExport
from lifecycle.tasks import build_tenant_export
from tenancy.models import AuditAction, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit


@dataclass(frozen=True)
class ExportState:
    """What the page and REST show of a tenant's export."""

    status: str  # "none", "building", "ready", "failed"
    export: TenantExport | None = None

    @property
    def building(self) -> bool:
        return self.status == ExportStatus.BUILDING


def _stale_before() -> datetime.datetime:
    return timezone.now() - datetime.timedelta(seconds=settings.TENANT_EXPORT_STALE_S)


def export_state(*, tenant: Tenant) -> ExportState:
    made = TenantExport.objects.filter(tenant=tenant).select_related("requested_by").first()
    if made is None:
        return ExportState("none")
    if made.status == ExportStatus.BUILDING and made.updated_at < _stale_before():
        return ExportState(ExportStatus.FAILED, made)  # its worker died: ask again
    if made.status == ExportStatus.READY and made.expires_at and made.expires_at <= timezone.now():
        return ExportState("none")  # expired: the beat deletes it
    return ExportState(made.status, made)


def export_request(*, tenant: Tenant, by: Principal) -> ExportState:
    """Ask for the tenant's archive (an owner). While one builds, that one; otherwise a new
    one replaces the last. The worker is asked once this commits. Audited."""
    by.require(Action.EXPORT_TENANT)
    with transaction.atomic():
        current = export_state(tenant=tenant)
        if current.building:
            return current
        old = TenantExport.objects.select_for_update().filter(tenant=tenant).first()
        if old is not None:
            archive_delete(old.storage_key)
            old.delete()
        made = TenantExport.objects.create(tenant=tenant, requested_by=by.user)
        audit.record(
            tenant=tenant,
            action=AuditAction.EXPORT_REQUESTED,
            actor=by.initiator,
            obj=made,
            details={"export": made.pk},
        )
        export_id, tenant_id = made.pk, tenant.pk
        transaction.on_commit(lambda: _ask_worker(export_id, tenant_id))
    return ExportState(ExportStatus.BUILDING, made)


def _ask_worker(export_id: int, tenant_id: int) -> None:
    build_tenant_export.delay(export_id, tenant_id)


# -- downloading ----------------------------------------------------------------------------------
def export_open(*, tenant: Tenant, by: Principal) -> tuple[IO[bytes], str, int]:
    """The ready archive opened for reading, its download name and size (an owner); 404
    when none is ready. Audited, each time."""
    by.require(Action.EXPORT_TENANT)
    state = export_state(tenant=tenant)
    if state.status != ExportStatus.READY:
        raise Http404("No export is ready.")
    made = state.export
    try:
        opened = storages["attachments"].open(made.storage_key, "rb")
    except FileNotFoundError:
        raise Http404("No export is ready.") from None
    with transaction.atomic():
        TenantExport.objects.filter(pk=made.pk).update(downloads=made.downloads + 1)
        audit.record(
            tenant=tenant,
            action=AuditAction.EXPORT_DOWNLOADED,
            actor=by.initiator,
            obj=made,
            details={"export": made.pk, "size": made.size},
        )
    name = f"{tenant.slug}-export-{made.finished_at:%Y-%m-%d}.zip"
    return opened, name, made.size or 0
