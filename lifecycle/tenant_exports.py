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
import logging
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from lifecycle.export import tenant_export
from lifecycle.models import ExportStatus, TenantExport
from tenancy.models import AuditAction, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit

logger = logging.getLogger(__name__)
PROGRESS_EVERY_S = 1.0  # the row's progress is written at most this often


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
            _delete_file(old.storage_key)
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
    from lifecycle.tasks import build_tenant_export

    build_tenant_export.delay(export_id, tenant_id)


# -- the worker's side -----------------------------------------------------------------------
def export_build(export_id: int) -> str:
    """Build export `export_id` (in its tenant's scope): "ready", "failed", or "skipped" (no
    such export building: replaced, erased, or built already). The archive goes to a
    temporary file, then to the storage; the row says how far it got meanwhile."""
    made = TenantExport.objects.filter(pk=export_id, status=ExportStatus.BUILDING).first()
    if made is None:
        return "skipped"
    tenant = Tenant.objects.filter(pk=made.tenant_id, active=True).first()
    if tenant is None:
        return "skipped"
    last = [0.0]

    def progress(kind: str, rows: int) -> None:
        if time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            TenantExport.objects.filter(pk=export_id).update(
                progress=kind[:100], rows_done=rows, updated_at=timezone.now()
            )

    key = f"t{tenant.pk}/exports/{uuid.uuid4().hex}.zip"
    try:
        with tempfile.NamedTemporaryFile(prefix="tenant-export-", suffix=".zip") as archive:
            summary = tenant_export(tenant=tenant, output=archive, progress=progress)
            size = archive.tell()
            archive.seek(0)
            stored = storages["attachments"].save(key, File(archive, name=key))
    except Exception:
        logger.exception("tenant export %s failed", export_id)
        TenantExport.objects.filter(pk=export_id).update(
            status=ExportStatus.FAILED, progress="", finished_at=timezone.now()
        )
        return "failed"
    now = timezone.now()
    kept = datetime.timedelta(hours=settings.TENANT_EXPORT_KEEP_HOURS)
    finished = TenantExport.objects.filter(pk=export_id, status=ExportStatus.BUILDING).update(
        status=ExportStatus.READY, storage_key=stored, size=size, progress="",
        rows_done=sum(summary.rows.values()), finished_at=now, expires_at=now + kept,
    )  # fmt: skip
    if not finished:  # replaced or erased meanwhile: the file is nobody's
        _delete_file(stored)
        return "skipped"
    return "ready"


# -- downloading and expiry --------------------------------------------------------------------
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


def exports_expire() -> int:
    """Delete the archives past their time, and the rows of builds that died long ago (the
    beat, hourly; across tenants). How many went."""
    now = timezone.now()
    dead = now - datetime.timedelta(hours=settings.TENANT_EXPORT_KEEP_HOURS)
    gone = 0
    expired = TenantExport.objects.filter(expires_at__lte=now) | TenantExport.objects.filter(
        status__in=[ExportStatus.BUILDING, ExportStatus.FAILED], updated_at__lt=dead
    )
    for made in expired.order_by("pk")[:1000]:
        _delete_file(made.storage_key)
        gone += TenantExport.objects.filter(pk=made.pk, updated_at=made.updated_at).delete()[0]
    return gone


def _delete_file(key: str) -> None:
    if key:
        storage = storages["attachments"]
        if storage.exists(key):
            storage.delete(key)
