"""Knowledge bases in a real browser: an admin creates a full-text knowledge base, pastes a
document, watches its progress reach "Ready" (htmx polling under the strict CSP, the
session's Celery worker ingesting), and the search tester finds it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from rag.models import Document, DocumentStatus

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = """# Holidays

## Paid leave

Everyone gets 25 days of paid holiday a year, plus public holidays.

## Sick leave

Tell your manager before ten o'clock on the first day.
"""


def test_an_admin_pastes_a_document_watches_it_ingest_and_finds_it(
    trio, celery_worker_process, tab
):
    tab.login("alice")
    page = tab.page
    nav = page.get_by_role("navigation", name="Workspace")
    nav.get_by_text("Build").click()  # the menu
    nav.get_by_role("link", name="Knowledge").click()
    page.wait_for_url(f"{tab.base}/t/acme/knowledge/")
    page.get_by_role("link", name="New knowledge base").click()
    page.get_by_label("Name", exact=True).fill("Employee handbook")
    page.get_by_label("Slug").fill("handbook")
    page.get_by_label("Full-text only (no embeddings)").check()
    page.get_by_role("button", name="Create knowledge base").click()
    page.wait_for_url(f"{tab.base}/t/acme/knowledge/handbook/documents/")
    expect(page.locator(".kb-summary")).to_contain_text("Full-text only")

    page.get_by_label("Title").fill("Leave policy")
    page.get_by_label("Or paste text").fill(HANDBOOK)
    page.get_by_role("button", name="Add document").click()
    page.wait_for_url(f"{tab.base}/t/acme/knowledge/handbook/documents/")
    row = page.locator("#documents tbody tr").filter(has_text="Leave policy")
    expect(row).to_have_count(1)
    # Polled in place (no reload) until ingested; then the polling stops.
    expect(row.locator(".status")).to_have_text("Ready", timeout=30_000)
    expect(page.locator("#documents")).to_have_attribute("data-ingesting", "false")
    expect(page.locator("#documents[hx-trigger]")).to_have_count(0)
    expect(row.locator("progress")).to_have_count(0)
    document = Document.objects.get(title="Leave policy")
    assert document.status == DocumentStatus.READY and document.chunk_count >= 1
    tab.screenshot("knowledge_documents")

    page.get_by_role("link", name="Search tester").click()
    page.wait_for_url(f"{tab.base}/t/acme/knowledge/handbook/search/")
    page.get_by_label("Query").fill("how many days of paid holiday")
    page.get_by_role("button", name="Search").click()
    hits = page.locator("#hits .hit")
    expect(hits.first).to_be_visible()
    first = hits.filter(has_text="25 days").first
    expect(first.locator(".hit-title")).to_have_text("Leave policy")
    expect(first.locator(".heading-path")).to_contain_text("Holidays")
    assert page.url.endswith("/t/acme/knowledge/handbook/search/")  # swapped in place
    tab.screenshot("knowledge")
    page.set_viewport_size({"width": 390, "height": 800})
    tab.screenshot("knowledge_narrow")
    tab.assert_clean()


def test_a_member_sees_no_knowledge_link_and_gets_403(trio, tab):
    tab.login("bob")
    tab.page.wait_for_url(f"{tab.base}/t/acme/")
    nav = tab.page.get_by_role("navigation", name="Workspace")
    assert nav.get_by_role("link", name="Knowledge").count() == 0
    assert tab.goto("/t/acme/knowledge/").status == 403
    tab.assert_clean()
