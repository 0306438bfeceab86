"""A tenant's erasure: every row, stored file, Redis key and cached copy of it, gone
(docs/operations.md, "Offboarding").

`tenant_erase` is idempotent and resumable: each step deletes what is still there, in
batches each committed on its own, so a process killed at any point leaves a state from
which running it again reaches the same end (the tenant row goes last: until then the
tenant is found by its slug, and marked inactive so no request or run of it starts).

The order: the tenant made inactive and its versions bumped (every process drops what it
built from the tenant's configuration at its next read); then, table by table
(`lifecycle.tables`: what points at a row before the row), batches of rows, each batch
taking along what belongs to its rows outside the tenant tables (a run's Redis keys, an
attachment's stored file, object permissions and admin log entries naming them, the auth
group behind a tenant group); then the audit log (append-only: its trigger lets a tenant
purge pass); then the Redis keys named by the tenant's id and the storage directory
`t<id>/`; last, the tenant row.

Every query names the tenant's rows by `tenant_id`, so another tenant's rows are never
touched; the management command runs as the database owner (row-level security binds the
app's role, not the owner), and the scan test checks the second tenant is untouched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.cache import cache
from django.core.files.storage import Storage, storages
from django.db import connection, models, transaction
from guardian.models import GroupObjectPermission, UserObjectPermission

from agents.models import Attachment, Quota, Run, Trigger
from base import versions
from lifecycle.tables import tenant_models
from tenancy import rls
from tenancy.models import ApiKey, AuditEntry, Tenant, TenantGroup
from tenancy.records import audit

log = logging.getLogger(__name__)

BATCH = 500
Progress = Callable[[str, int], None]


@dataclass
class ErasureSummary:
    tenant_id: int
    rows: dict[str, int] = field(default_factory=dict)
    files: int = 0
    redis_keys: int = 0


def _noop(label: str, count: int) -> None:
    return None


# -- Redis ------------------------------------------------------------------------------------
def tenant_version_keys(tenant_id: int) -> list[str]:
    """The versions named by the tenant's id (base.versions: configuration; agents.quotas,
    providers.pricing, tenancy.records.history: their own): bumped first, deleted last."""
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    kinds = ("tools", "quotas", "prices", "config-versions")
    return [f"{prefix}:{kind}:version:{tenant_id}" for kind in kinds]


def tenant_key_patterns(tenant_id: int) -> list[str]:
    """SCAN patterns of the counters and states named by the tenant's id: its tools' rate
    counters (tools.rate_limits), its API budget (tenancy.request_budgets), its tools'
    circuit breakers (tools.runtime.circuit)."""
    return [
        cache.make_key(f"tool-rate:{tenant_id}:") + "*",
        cache.make_key(f"throttle:tenant:{tenant_id}"),
        f"ap:circuit:{tenant_id}:*",
    ]


def run_keys(run: Run) -> list[str]:
    """A run's channel, cancel flag and steering list (agents.runs: channels, cancellation,
    steering)."""
    base = f"ap:run:{run.pk}:{run.correlation_id}"
    return [f"{base}:events", f"{base}:cancel", f"{base}:steer"]


def _delete_matching(patterns: list[str]) -> int:
    """The keys matching `patterns` (a SCAN of the keyspace each: few patterns a tenant)."""
    client = versions.shared_redis()
    deleted = 0
    for pattern in patterns:
        batch = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(batch), 1000):
            deleted += client.delete(*batch[start : start + 1000])
    return deleted


# -- what goes with a batch of rows -------------------------------------------------------------
def _alongside(
    model: type[models.Model], rows: list[models.Model], summary: ErasureSummary
) -> None:
    """What belongs to `rows` outside the tenant tables: deleted before the rows (a crash
    after this, before the rows go, repeats it harmlessly)."""
    if model is Run:
        keys = [key for run in rows for key in run_keys(run)]
        summary.redis_keys += versions.shared_redis().delete(*keys)
    elif model is Attachment:
        summary.files += _delete_files(storages["attachments"], [a.storage_key for a in rows])
    elif model is Quota:
        summary.redis_keys += _delete_matching(
            [cache.make_key(f"quota:{quota.pk}:") + "*" for quota in rows]
        )
    elif model is ApiKey:  # its API budget (tenancy.request_budgets)
        keys = [cache.make_key(f"throttle:key:{k.pk}") for k in rows]
        summary.redis_keys += versions.shared_redis().delete(*keys)
    elif model is Trigger:  # its webhook's delivery counter (agents.triggers)
        keys = [cache.make_key(f"trigger-hook:{t.public_id}") for t in rows]
        summary.redis_keys += versions.shared_redis().delete(*keys)
    elif model is TenantGroup:  # the auth group behind it: its object permissions cascade
        Group.objects.filter(pk__in=[g.group_id for g in rows]).delete()
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    ids = [str(row.pk) for row in rows]
    for permission in (UserObjectPermission, GroupObjectPermission):
        permission.objects.filter(content_type=content_type, object_pk__in=ids).delete()
    LogEntry.objects.filter(content_type=content_type, object_id__in=ids).delete()


def _delete_files(storage: Storage, keys: list[str]) -> int:
    deleted = 0
    for key in keys:
        if key and storage.exists(key):
            storage.delete(key)
            deleted += 1
    return deleted


def _sweep_directory(storage: Storage, directory: str) -> int:
    """Every file under `directory` (files whose rows went before a crash), and on a
    filesystem the emptied directories too."""
    deleted = 0
    try:
        folders, files = storage.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in files:
        storage.delete(f"{directory}/{name}")
        deleted += 1
    for folder in folders:
        deleted += _sweep_directory(storage, f"{directory}/{folder}")
    try:
        path = storage.path(directory)
    except NotImplementedError:  # object storage: no directories
        return deleted
    if os.path.isdir(path):
        os.rmdir(path)
    return deleted


# -- the erasure ------------------------------------------------------------------------------
def tenant_erase(
    *, tenant: Tenant, batch: int = BATCH, progress: Progress = _noop
) -> ErasureSummary:
    """Erase `tenant` and everything it holds. Costs one query per batch per table plus the
    cascades of each batch; holds no lock longer than one batch's transaction. `progress`
    hears each committed batch (a table's label, its rows)."""
    # Under the app's role (a web process: the admin's action), row-level security then
    # admits this tenant's rows only: the second wall behind every query's tenant filter.
    with rls.tenant_scope(tenant.pk):
        return _erase(tenant, batch, progress)


def _erase(tenant: Tenant, batch: int, progress: Progress) -> ErasureSummary:
    summary = ErasureSummary(tenant_id=tenant.pk)
    tenant_id = tenant.pk
    Tenant.objects.filter(pk=tenant_id).update(active=False)
    for key in tenant_version_keys(tenant_id):
        versions.bump(key)
    log.info("tenant erasure started", extra={"tenant_id": tenant_id})
    for model in tenant_models():
        if model is AuditEntry:
            continue
        label = model._meta.label_lower
        rows_of = model._base_manager.filter(tenant_id=tenant_id).order_by("pk")
        while rows := list(rows_of[:batch]):
            with transaction.atomic():
                _alongside(model, rows, summary)
                _, by_model = model._base_manager.filter(pk__in=[r.pk for r in rows]).delete()
            for name, count in by_model.items():
                summary.rows[name.lower()] = summary.rows.get(name.lower(), 0) + count
            progress(label, len(rows))
    summary.rows["tenancy.auditentry"] = _purge_audit(tenant_id, batch, progress)
    summary.redis_keys += _delete_matching(tenant_key_patterns(tenant_id))
    summary.files += _sweep_directory(storages["attachments"], f"t{tenant_id}")
    with transaction.atomic():
        _alongside(Tenant, [tenant], summary)
        summary.redis_keys += versions.shared_redis().delete(*tenant_version_keys(tenant_id))
        Tenant.objects.filter(pk=tenant_id).delete()  # cascades whatever arrived meanwhile
    progress("tenancy.tenant", 1)
    log.info("tenant erased", extra={"tenant_id": tenant_id, "rows": sum(summary.rows.values())})
    return summary


def _purge_audit(tenant_id: int, batch: int, progress: Progress) -> int:
    """The tenant's audit entries, a batch a transaction (the append-only trigger admits a
    tenant purge the transaction announces, `audit.allow_purge`)."""
    table = AuditEntry._meta.db_table
    total = 0
    while True:
        with transaction.atomic():
            audit.allow_purge(tenant_id)
            with connection.cursor() as cursor:
                cursor.execute(
                    f'DELETE FROM "{table}" WHERE id IN '  # noqa: S608 (our table's name)
                    f'(SELECT id FROM "{table}" WHERE tenant_id = %s ORDER BY id LIMIT %s)',
                    [tenant_id, batch],
                )
                deleted = cursor.rowcount
        if not deleted:
            return total
        total += deleted
        progress("tenancy.auditentry", deleted)
