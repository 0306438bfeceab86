"""The data's life in Chromium (docs/operations.md, "Retention", "Offboarding"): an owner
sets retention and holds a conversation; asks for the workspace's archive, watches it
build (the worker's task run by the test, the page polling by itself) and downloads it,
then asks for the erasure; a member downloads their own data. axe-core finds nothing
serious, the CSP nothing at all. Screenshots in tests/browser/artifacts/."""

from __future__ import annotations

import json
import zipfile

import pytest
from playwright.sync_api import expect

from agents.models import Conversation, Message
from lifecycle import tasks
from lifecycle.models import LegalHold, RetentionPolicy, TenantErasureRequest, TenantExport
from tests.browser.conftest import assert_accessible
from tests.factories import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_owner_sets_retention_and_holds_a_conversation(trio, axe_tab):
    chat = Conversation.objects.create(
        tenant=trio.acme, agent=make_agent(trio.acme), owner_user=trio.bob, title="dispute"
    )
    tab = axe_tab
    tab.login("alice")
    tab.goto("/t/acme/retention/")
    page = tab.page
    page.get_by_label("Runs' events (days)").fill("-3")
    page.get_by_role("button", name="Save retention").click()
    expect(page.locator(".errorlist").first).to_be_visible()  # refused beside its field
    assert not RetentionPolicy.objects.filter(tenant=trio.acme, run_days__isnull=False).exists()

    page.get_by_label("Runs' events (days)").fill("90")
    page.get_by_label("Conversations (days)").fill("0")
    page.get_by_role("button", name="Save retention").click()
    expect(page.get_by_text("Retention saved.")).to_be_visible()
    page.get_by_label("Conversation number").fill(str(chat.pk))
    page.get_by_label("Reason", exact=True).fill("Dispute 2026-118")
    page.get_by_role("button", name="Place hold").click()
    expect(page.get_by_text("Conversation held.")).to_be_visible()
    expect(page.get_by_text(f"Conversation {chat.pk}: Dispute 2026-118")).to_be_visible()
    policy = RetentionPolicy.objects.get(tenant=trio.acme)
    assert (policy.run_days, policy.conversation_days) == (90, 0)
    assert LegalHold.objects.filter(conversation=chat).exists()
    tab.screenshot("retention-page")
    assert_accessible(tab, "the retention page")
    tab.assert_clean()


def test_an_owner_exports_the_workspace_then_asks_for_its_erasure(trio, axe_tab, tmp_path):
    make_agent(trio.acme, "acme-helper")
    tab = axe_tab
    tab.login("alice")
    tab.goto("/t/acme/erasure/")  # its "the workspace's archive" leads to the export
    tab.page.get_by_role("link", name="the workspace's archive").click()
    page = tab.page
    page.wait_for_url("**/t/acme/export/")
    page.get_by_role("button", name="Export the workspace").click()
    expect(page.locator("#export-building")).to_be_visible()
    tab.screenshot("tenant-export-building")
    assert_accessible(tab, "the export page while it builds")

    made = TenantExport.objects.get(tenant=trio.acme)
    # Built as the worker does; "skipped" when the session's Celery worker (started by an
    # earlier test of this process) took the task first: either way it is ready after.
    assert tasks.build_tenant_export(made.pk, trio.acme.pk) in ("ready", "skipped")
    made.refresh_from_db()
    assert made.status == "ready"
    link = page.get_by_role("link", name="Download the archive")
    expect(link).to_be_visible(timeout=15_000)  # the page's own poll found it ready
    tab.screenshot("tenant-export-ready")
    with page.expect_download() as caught:
        link.click()
    saved = tmp_path / "acme.zip"
    caught.value.save_as(saved)
    with zipfile.ZipFile(saved) as archive:
        assert json.loads(archive.read("manifest.json"))["tenant"]["slug"] == "acme"
        assert b"acme-helper" in archive.read("data/agents.agent.jsonl")
    assert_accessible(tab, "the export page once ready")

    tab.goto("/t/acme/erasure/")
    page.get_by_label("Type acme to confirm").fill("acme")
    page.get_by_role("button", name="Ask for the erasure").click()
    expect(page.locator("#erasure-pending")).to_be_visible()
    assert TenantErasureRequest.objects.filter(tenant=trio.acme).exists()
    tab.screenshot("tenant-erasure-requested")
    assert_accessible(tab, "the erasure page with a request")
    tab.assert_clean()


def test_a_member_downloads_their_own_data(trio, axe_tab, tmp_path):
    chat = Conversation.objects.create(
        tenant=trio.acme, agent=make_agent(trio.acme), owner_user=trio.bob, title="bob's"
    )
    Message.objects.create(tenant=trio.acme, conversation=chat, role="user", content="bobword")
    tab = axe_tab
    tab.login("bob")
    tab.goto("/t/acme/memory/")
    tab.page.get_by_role("link", name="Download all your data").click()
    page = tab.page
    page.wait_for_url("**/t/acme/my-data/")
    tab.screenshot("my-data")
    assert_accessible(tab, "the person's data page")
    with page.expect_download() as caught:
        page.get_by_role("link", name="Download my data").click()
    saved = tmp_path / "bob.zip"
    caught.value.save_as(saved)
    with zipfile.ZipFile(saved) as archive:
        assert b"bobword" in archive.read("conversations.jsonl")
    tab.assert_clean()
