"""`manage.py tenant delete` (lifecycle/erasure.py): a full tenant erased leaves nothing —
no row in any table, no stored file, no Redis key — and a second tenant keeps everything;
killed half-way (a real process, kill -9), a second run reaches the same end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.files.storage import storages
from django.core.management import CommandError, call_command
from django.db import connection

from base import versions
from lifecycle.erasure import run_keys, tenant_version_keys
from lifecycle.tables import tenant_models
from rag.models import Document, DocumentStatus
from rag.tasks import ingest_document
from tenancy.models import Tenant
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_user
from tests.lifecycle.tenant_data import Held, forget_redis, full_tenant

pytestmark = pytest.mark.django_db(transaction=True)

GONE, KEPT = "Zorblax", "Quintavel"


@pytest.fixture
def two_tenants() -> Iterator[tuple[Held, Held]]:
    owner, member, other = make_user("olga"), make_user("mika"), make_user("otto")
    gone = full_tenant("zorb-corp", owner, member, mark=GONE)
    kept = full_tenant("quint-corp", other, member, mark=KEPT)
    yield gone, kept
    forget_redis(gone, kept)


def rows_of(tenant_id: int) -> dict[str, int]:
    counts = {}
    for model in tenant_models():
        count = model._base_manager.filter(tenant_id=tenant_id).count()
        if count:
            counts[model._meta.label_lower] = count
    return counts


def text_hits(needles: list[str]) -> list[str]:
    """Every text or JSON column of every table holding one of `needles`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type IN "
            "('text', 'character varying', 'jsonb', 'json', 'ARRAY')"
        )
        columns = cursor.fetchall()
        hits = []
        for table, column in columns:
            for needle in needles:
                cursor.execute(
                    f'SELECT count(*) FROM "{table}" WHERE "{column}"::text ILIKE %s',  # noqa: S608
                    [f"%{needle}%"],
                )
                if cursor.fetchone()[0]:
                    hits.append(f"{table}.{column}: {needle}")
    return hits


def tenant_id_hits(tenant_id: int) -> list[str]:
    """Every table with a tenant_id column holding `tenant_id`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name = 'tenant_id'"
        )
        tables = [row[0] for row in cursor.fetchall()]
        hits = []
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}" WHERE tenant_id = %s', [tenant_id])  # noqa: S608
            if cursor.fetchone()[0]:
                hits.append(table)
        cursor.execute("SELECT count(*) FROM auth_group WHERE name LIKE %s", [f"{tenant_id}:%"])
        if cursor.fetchone()[0]:
            hits.append("auth_group")
    return hits


def stored_files(tenant_id: int) -> list[str]:
    root = Path(storages["attachments"].location)
    return [str(p) for p in root.glob(f"t{tenant_id}/**/*")] + (
        [str(root / f"t{tenant_id}")] if (root / f"t{tenant_id}").exists() else []
    )


def redis_keys(held: Held) -> list[str]:
    client = versions.shared_redis(decode=True)
    tenant_id = held.tenant.pk
    named = [k for run in held.runs for k in run_keys(run)] + tenant_version_keys(tenant_id)
    found = [k for k in named if client.exists(k)]
    for pattern in (
        cache.make_key(f"tool-rate:{tenant_id}:") + "*",
        cache.make_key(f"quota:{held.quota.pk}:") + "*",
        f"ap:circuit:{tenant_id}:*",
        cache.make_key(f"throttle:key:{held.key.pk}"),
        cache.make_key(f"throttle:tenant:{tenant_id}"),
        cache.make_key(f"trigger-hook:{held.trigger.public_id}"),
    ):
        found += list(client.scan_iter(match=pattern))
    found += [k for k in client.scan_iter(count=1000) if GONE in k or held.tenant.slug in k]
    return found


def assert_erased(gone: Held) -> None:
    assert not Tenant.objects.filter(pk=gone.tenant.pk).exists()
    assert rows_of(gone.tenant.pk) == {}
    assert tenant_id_hits(gone.tenant.pk) == []
    assert text_hits([GONE, gone.tenant.slug, f"t{gone.tenant.pk}/"]) == []
    assert stored_files(gone.tenant.pk) == []
    assert redis_keys(gone) == []


def documents_ingested(*held: Held, timeout: float = 30.0) -> None:
    """The tenants' documents ingested now, and no worker's delivery of their ingestion (a
    task queued at commit, if the session runs a worker) still in flight: it would add
    chunks while the tenants are counted or erased. A later delivery leaves a ready
    document alone."""
    documents = Document.objects.filter(knowledge_base__tenant__in=[h.tenant.pk for h in held])
    for document_id in documents.values_list("pk", flat=True):
        ingest_document(document_id)
    deadline = time.monotonic() + timeout
    while documents.exclude(status=DocumentStatus.READY).exists():
        assert time.monotonic() < deadline, "the documents were not ingested in time"
        time.sleep(0.05)


def assert_untouched(kept: Held, before: dict[str, int]) -> None:
    assert Tenant.objects.filter(pk=kept.tenant.pk, active=True).exists()
    assert rows_of(kept.tenant.pk) == before
    assert len(stored_files(kept.tenant.pk)) >= 1
    assert versions.shared_redis().exists(run_keys(kept.runs[0])[0])
    assert versions.shared_redis().exists(cache.make_key(f"throttle:key:{kept.key.pk}"))
    assert text_hits([KEPT])  # its names are still in its rows


def test_it_erases_every_row_file_and_key_of_the_tenant_and_nothing_else(two_tenants):
    gone, kept = two_tenants
    before = rows_of(kept.tenant.pk)
    assert rows_of(gone.tenant.pk).keys() >= {
        "agents.agent", "agents.run", "agents.runevent", "agents.message", "agents.fact",
        "agents.attachment", "rag.document", "agents.trigger", "tenancy.apikey",
        "tenancy.auditentry", "tenancy.tenantgroup", "agents.quota",
    }  # fmt: skip
    assert stored_files(gone.tenant.pk) and redis_keys(gone)

    call_command(
        "tenant", "delete", "--tenant", "zorb-corp", "--yes-delete-everything", "--batch", "2"
    )

    assert_erased(gone)
    assert_untouched(kept, before)
    call_command("tenant", "delete", "--tenant", "zorb-corp", "--yes-delete-everything")  # again
    assert_untouched(kept, before)


def test_it_refuses_without_the_confirmation_and_deletes_nothing(two_tenants):
    gone, _ = two_tenants
    before = rows_of(gone.tenant.pk)
    with pytest.raises(CommandError, match="--yes-delete-everything"):
        call_command("tenant", "delete", "--tenant", "zorb-corp")
    assert rows_of(gone.tenant.pk) == before


@pytest.mark.integration
def test_killed_half_way_a_second_run_reaches_the_same_end(two_tenants):
    gone, kept = two_tenants
    documents_ingested(gone, kept)  # committed here, so the session's worker ingests them
    before = rows_of(kept.tenant.pk)
    child = processes.spawn(
        [sys.executable, "manage.py", "tenant", "-v", "2", "delete", "--tenant", "zorb-corp",
         "--yes-delete-everything", "--batch", "1"],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deleted = 0
        for line in child.stdout:  # a few batches committed, then the crash
            deleted += line.startswith("deleted ")
            if deleted == 5:
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    half = Tenant.objects.get(pk=gone.tenant.pk)  # killed before its end: the tenant is still there
    assert not half.active and rows_of(gone.tenant.pk) != {}

    call_command("tenant", "delete", "--tenant", "zorb-corp", "--yes-delete-everything")

    assert_erased(gone)
    assert_untouched(kept, before)
