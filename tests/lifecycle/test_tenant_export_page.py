"""An owner's archive of the whole workspace (lifecycle/tenant_exports.py) on the page
(`/t/<tenant>/export/`) and over REST (`/api/v1/tenant/export`): asked for, built by the
worker's task (run here as the worker runs it), followed, downloaded by owners only and
audited; kept in the attachments' storage until it expires, then deleted.

acme: alice (owner), bob (member); globex: charlie (owner).
"""

from __future__ import annotations

import datetime
import io
import json
import zipfile

import pytest
from django.core.files.storage import storages
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from lifecycle import tasks
from lifecycle.export_builds import exports_expire
from lifecycle.models import TenantExport
from tenancy import services as tenancy
from tenancy.models import AuditEntry
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    """The tasks the page sends, as (export id, tenant id): a test runs them as a worker."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(tasks.build_tenant_export, "delay", lambda *args: sent.append(args))
    return sent


def archive_of(response) -> dict[str, bytes]:
    body = b"".join(response.streaming_content)
    archive = zipfile.ZipFile(io.BytesIO(body))
    return {name: archive.read(name) for name in archive.namelist()}


def test_an_owner_asks_follows_and_downloads_the_archive(
    trio, sent, django_capture_on_commit_callbacks
):
    make_agent(trio.acme, "acme-helper")
    make_agent(trio.globex, "globex-helper")
    alice = login(Client(), trio.alice)
    page = alice.get("/t/acme/export/")
    assert page.status_code == 200 and b'id="export-request"' in page.content
    with django_capture_on_commit_callbacks(execute=True):
        assert alice.post("/t/acme/export/").status_code == 302
    ((export_id, tenant_id),) = sent
    building = alice.get("/t/acme/export/", HTTP_HX_REQUEST="true")
    assert b'data-status="building"' in building.content and b"every 2s" in building.content
    assert b"<html" not in building.content  # the polled part alone
    with django_capture_on_commit_callbacks(execute=True):  # asked twice: the same one
        alice.post("/t/acme/export/")
    assert len(sent) == 1 and TenantExport.objects.get().pk == export_id

    assert tasks.build_tenant_export(export_id, tenant_id) == "ready"  # as the worker does
    assert tasks.build_tenant_export(export_id, tenant_id) == "skipped"  # delivered again
    made = TenantExport.objects.get()
    assert made.storage_key.startswith(f"t{trio.acme.pk}/exports/")
    assert storages["attachments"].exists(made.storage_key) and made.size > 0
    ready = alice.get("/t/acme/export/")
    assert b'data-status="ready"' in ready.content and b"every 2s" not in ready.content

    download = alice.get("/t/acme/export/download/")
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    files = archive_of(download)
    manifest = json.loads(files["manifest.json"])
    assert manifest["tenant"]["slug"] == "acme"
    everything = b"".join(files.values())
    assert b"acme-helper" in everything and b"globex-helper" not in everything
    actions = list(
        AuditEntry.objects.filter(tenant=trio.acme, action__startswith="export.").values_list(
            "action", flat=True
        )
    )
    assert sorted(actions) == ["export.downloaded", "export.requested"]


def test_only_the_tenants_owners_reach_it(trio, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        login(Client(), trio.alice).post("/t/acme/export/")
    tasks.build_tenant_export(*sent[0])
    bob = login(Client(), trio.bob)  # a member of acme
    assert bob.get("/t/acme/export/").status_code == 403
    assert bob.post("/t/acme/export/").status_code == 403
    assert bob.get("/t/acme/export/download/").status_code == 403
    charlie = login(Client(), trio.charlie)  # globex's owner
    assert charlie.get("/t/acme/export/").status_code == 404
    assert charlie.get("/t/acme/export/download/").status_code == 404
    assert charlie.get("/t/globex/export/download/").status_code == 404  # none of globex's
    assert TenantExport.objects.count() == 1
    assert not AuditEntry.objects.filter(action="export.downloaded").exists()


def test_over_rest_with_an_owners_key(trio, sent, django_capture_on_commit_callbacks):
    _, owner_secret = tenancy.api_key_create(
        tenant=trio.acme, name="owner", scopes=["admin"], created_by=trio.alice
    )
    owner = APIClient(HTTP_AUTHORIZATION=f"Bearer {owner_secret}")
    assert owner.get("/api/v1/tenant/export").json()["status"] == "none"
    assert owner.get("/api/v1/tenant/export/download").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        asked = owner.post("/api/v1/tenant/export")
    assert asked.status_code == 202 and asked.json()["status"] == "building"
    tasks.build_tenant_export(*sent[0])
    shown = owner.get("/api/v1/tenant/export").json()
    assert shown["status"] == "ready" and shown["size"] > 0
    assert shown["download_url"].endswith("/api/v1/tenant/export/download")
    download = owner.get("/api/v1/tenant/export/download")
    assert download.status_code == 200
    assert json.loads(archive_of(download)["manifest.json"])["tenant"]["slug"] == "acme"

    _, reader = tenancy.api_key_create(
        tenant=trio.acme, name="reader", scopes=["read"], created_by=trio.alice
    )
    assert APIClient().get(
        "/api/v1/tenant/export", HTTP_AUTHORIZATION=f"Bearer {reader}"
    ).status_code == 403  # fmt: skip
    member = login(APIClient(), trio.bob, tenant="acme")
    assert member.get("/api/v1/tenant/export/download").status_code == 403
    assert member.post("/api/v1/tenant/export").status_code == 403


def test_expired_and_dead_builds_go(trio, sent, django_capture_on_commit_callbacks, settings):
    alice = login(Client(), trio.alice)
    with django_capture_on_commit_callbacks(execute=True):
        alice.post("/t/acme/export/")
    first = TenantExport.objects.get()
    # Its worker died: no progress for TENANT_EXPORT_STALE_S, so it shows as failed ...
    long_ago = timezone.now() - datetime.timedelta(seconds=settings.TENANT_EXPORT_STALE_S + 1)
    TenantExport.objects.filter(pk=first.pk).update(updated_at=long_ago)
    assert b'data-status="failed"' in alice.get("/t/acme/export/").content
    with django_capture_on_commit_callbacks(execute=True):  # ... and asking again replaces it
        alice.post("/t/acme/export/")
    assert len(sent) == 2 and not TenantExport.objects.filter(pk=first.pk).exists()
    assert tasks.build_tenant_export(*sent[0]) == "skipped"  # the old delivery, late
    assert tasks.build_tenant_export(*sent[1]) == "ready"
    made = TenantExport.objects.get()
    assert exports_expire() == 0  # not yet
    TenantExport.objects.filter(pk=made.pk).update(expires_at=timezone.now())
    assert alice.get("/t/acme/export/download/").status_code == 404
    assert exports_expire() == 1
    assert not storages["attachments"].exists(made.storage_key)
    assert not TenantExport.objects.exists()
    assert b'data-status="none"' in alice.get("/t/acme/export/").content
