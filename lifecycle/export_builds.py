"""A workspace archive's build (the worker's side of lifecycle.tenant_exports: the batch
queue's `lifecycle.build_tenant_export`) and the hourly expiry of built ones
(`lifecycle.expire_tenant_exports`)."""

from __future__ import annotations

import datetime
import logging
import tempfile
import time
import uuid

from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages
from django.utils import timezone

from lifecycle.export import tenant_export
from lifecycle.models import ExportStatus, TenantExport
from tenancy.models import Tenant

logger = logging.getLogger(__name__)
PROGRESS_EVERY_S = 1.0  # the row's progress is written at most this often


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
        archive_delete(stored)
        return "skipped"
    return "ready"


# -- expiry ------------------------------------------------------------------------------------
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
        archive_delete(made.storage_key)
        gone += TenantExport.objects.filter(pk=made.pk, updated_at=made.updated_at).delete()[0]
    return gone


def archive_delete(key: str) -> None:
    if key:
        storage = storages["attachments"]
        if storage.exists(key):
            storage.delete(key)
