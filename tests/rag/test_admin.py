"""Knowledge bases, documents and chunks in the tenant-scoped admin: pages render, writes go
through the rag services, another tenant's rows are 404 (and never listed), chunks are
read-only, and the search tester finds the tenant's own chunks only."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from rag import services, tasks
from rag.ingestion import ingest
from rag.models import Chunk, Document, KnowledgeBase
from tests.factories import login, make_agent

HOLIDAYS = "# Holidays\n\n## Paid leave\n\nEveryone gets 25 days of paid holiday a year."
KB_FORM = {
    "name": "Handbook",
    "slug": "handbook",
    "description": "",
    "embedder": "lexical",
    "embedding_model": "",
    "dimensions": "",
    "chunk_size": "400",
    "chunk_overlap": "60",
}


def lexical(tenant, slug: str = "handbook") -> KnowledgeBase:
    return services.knowledge_base_save(
        tenant=tenant, changes={"slug": slug, "name": slug.title(), "embedder": "lexical"}
    )


def ready(knowledge_base: KnowledgeBase, title: str) -> Document:
    document = services.document_add(
        tenant=knowledge_base.tenant, knowledge_base=knowledge_base, title=title, text=HOLIDAYS
    )
    assert ingest(document.pk) == "ready"
    return document


@pytest.fixture
def rows(trio):
    """A ready document in acme's and in globex's knowledge base (identical text)."""
    mine, theirs = lexical(trio.acme), lexical(trio.globex, "secret")
    return {
        "mine": mine,
        "theirs": theirs,
        "my_document": ready(mine, "Our holidays"),
        "their_document": ready(theirs, "Their holidays"),
    }


@pytest.fixture
def no_queue(monkeypatch):
    """Ingestion requests recorded instead of sent to a worker."""
    queued: list[tuple] = []
    monkeypatch.setattr(tasks.ingest_document, "delay", lambda *args: queued.append(args))
    return queued


def test_admin_pages_render(client, trio, rows):
    login(client, trio.alice)
    mine, document = rows["mine"], rows["my_document"]
    chunk = Chunk.objects.filter(document=document).first()
    for page in (
        "/admin/rag/knowledgebase/",
        "/admin/rag/knowledgebase/add/",
        f"/admin/rag/knowledgebase/{mine.pk}/change/",
        f"/admin/rag/knowledgebase/{mine.pk}/search/",
        "/admin/rag/document/",
        "/admin/rag/document/add/",
        f"/admin/rag/document/{document.pk}/change/",
        "/admin/rag/chunk/",
        f"/admin/rag/chunk/{chunk.pk}/change/",
    ):
        response = client.get(page)
        assert response.status_code == 200, page
    documents = client.get("/admin/rag/document/").content.decode()
    assert "Our holidays" in documents and "Ready" in documents and "100%" in documents


def test_another_tenants_rows_are_404_and_never_listed(client, trio, rows):
    login(client, trio.alice)
    theirs, document = rows["theirs"], rows["their_document"]
    chunk = Chunk.objects.filter(document=document).first()
    for page in (
        f"/admin/rag/knowledgebase/{theirs.pk}/change/",
        f"/admin/rag/knowledgebase/{theirs.pk}/delete/",
        f"/admin/rag/knowledgebase/{theirs.pk}/search/",
        f"/admin/rag/document/{document.pk}/change/",
        f"/admin/rag/document/{document.pk}/delete/",
        f"/admin/rag/chunk/{chunk.pk}/change/",
    ):
        assert client.get(page).status_code == 404, page
    assert (
        client.post(f"/admin/rag/knowledgebase/{theirs.pk}/search/", {"query": "x"}).status_code
        == 404
    )
    for listing in ("/admin/rag/knowledgebase/", "/admin/rag/document/", "/admin/rag/chunk/"):
        body = client.get(listing).content.decode()
        assert "Their holidays" not in body and "Secret" not in body, listing
    chunks = client.get(f"/admin/rag/chunk/?document__id__exact={document.pk}").content.decode()
    assert "25 days" not in chunks
    client.post(
        "/admin/rag/document/",
        {"action": "delete_selected", "_selected_action": [document.pk], "post": "yes"},
    )
    assert Document.objects.filter(pk=document.pk).exists()


def test_a_knowledge_base_is_saved_through_the_service_with_its_agents(
    client, trio, no_queue, django_capture_on_commit_callbacks
):
    agent, theirs = make_agent(trio.acme, "support"), make_agent(trio.globex, "theirs")
    login(client, trio.alice)
    assert "theirs" not in client.get("/admin/rag/knowledgebase/add/").content.decode()
    refused = client.post("/admin/rag/knowledgebase/add/", {**KB_FORM, "agents": [theirs.pk]})
    assert refused.status_code == 200 and not KnowledgeBase.objects.exists()
    response = client.post("/admin/rag/knowledgebase/add/", {**KB_FORM, "agents": [agent.pk]})
    assert response.status_code == 302, response.content.decode()
    knowledge_base = KnowledgeBase.objects.get(tenant=trio.acme, slug="handbook")
    assert list(knowledge_base.agents.all()) == [agent]
    assert list(agent.knowledge_bases.all()) == [knowledge_base]

    document = ready(knowledge_base, "Holidays")
    with django_capture_on_commit_callbacks(execute=True):
        changed = client.post(
            f"/admin/rag/knowledgebase/{knowledge_base.pk}/change/",
            {**KB_FORM, "chunk_size": "300", "agents": [agent.pk]},
        )
    assert changed.status_code == 302, changed.content.decode()
    assert KnowledgeBase.objects.get(pk=knowledge_base.pk).chunk_size == 300
    assert (document.pk, True) in no_queue  # the service queued the re-ingestion

    bad = client.post(
        "/admin/rag/knowledgebase/add/", {**KB_FORM, "slug": "two", "embedder": "provider"}
    )
    assert bad.status_code == 200 and "provider connection" in bad.content.decode()


def test_documents_are_added_through_the_add_form(client, trio, no_queue):
    knowledge_base = lexical(trio.acme)
    theirs = lexical(trio.globex, "secret")
    login(client, trio.alice)
    file = SimpleUploadedFile("notes.md", b"# Notes\n\nThe office opens at nine.", "text/markdown")
    response = client.post(
        "/admin/rag/document/add/",
        {"knowledge_base": knowledge_base.pk, "title": "", "upload": file},
    )
    assert response.status_code == 302, response.content.decode()
    document = Document.objects.get(knowledge_base=knowledge_base)
    assert document.tenant == trio.acme and document.filename == "notes.md"
    assert document.source == "upload" and document.status == "pending"
    assert no_queue == [] or no_queue == [(document.pk, False)]

    both = client.post(
        "/admin/rag/document/add/",
        {"knowledge_base": knowledge_base.pk, "text": "Hi.", "source_url": "https://example.com/"},
    )
    assert both.status_code == 200 and "exactly one source" in both.content.decode()
    foreign = client.post(
        "/admin/rag/document/add/", {"knowledge_base": theirs.pk, "text": "Injected."}
    )
    assert foreign.status_code == 200
    assert not Document.objects.filter(knowledge_base=theirs).exists()
    assert Document.objects.count() == 1


def test_reingest_and_delete_actions(client, trio, rows, no_queue):
    login(client, trio.alice)
    mine, theirs = rows["my_document"], rows["their_document"]
    response = client.post(
        "/admin/rag/document/",
        {"action": "reingest_selected", "_selected_action": [mine.pk, theirs.pk]},
    )
    assert response.status_code == 302
    assert no_queue == [] or no_queue == [(mine.pk, True)]  # on commit: see the next test

    client.post(
        "/admin/rag/document/",
        {"action": "delete_selected", "_selected_action": [mine.pk], "post": "yes"},
    )
    assert not Document.objects.filter(pk=mine.pk).exists()
    assert not Chunk.objects.filter(document_id=mine.pk).exists()
    assert Document.objects.filter(pk=theirs.pk).exists()


def test_the_reingest_action_queues_through_the_service(
    client, trio, rows, no_queue, django_capture_on_commit_callbacks
):
    login(client, trio.alice)
    mine, theirs = rows["my_document"], rows["their_document"]
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            "/admin/rag/document/",
            {"action": "reingest_selected", "_selected_action": [mine.pk, theirs.pk]},
        )
    assert no_queue == [(mine.pk, True)]


def test_adding_and_reingesting_past_the_admins_request_budget_do_nothing(
    client, trio, rows, no_queue, rates
):
    rates("0/min", None)
    login(client, trio.alice)
    added = client.post(
        "/admin/rag/document/add/", {"knowledge_base": rows["mine"].pk, "text": "New."}
    )
    assert added.status_code == 200 and "Rate limit reached; retry in" in added.content.decode()
    mine = rows["my_document"]
    page = client.post(
        "/admin/rag/document/",
        {"action": "reingest_selected", "_selected_action": [mine.pk]},
        follow=True,
    ).content.decode()
    assert "Rate limit reached; retry in" in page and "Queued" not in page
    mine.refresh_from_db()
    assert mine.status == "ready" and no_queue == []
    assert Document.objects.filter(knowledge_base=rows["mine"]).count() == 1


def test_chunks_are_read_only(client, trio, rows):
    login(client, trio.alice)
    chunk = Chunk.objects.get(document=rows["my_document"], text__contains="25 days")
    assert client.get("/admin/rag/chunk/add/").status_code == 403
    page = client.get(f"/admin/rag/chunk/{chunk.pk}/change/").content.decode()
    assert 'name="text"' not in page and "25 days" in page
    assert client.post(f"/admin/rag/chunk/{chunk.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Chunk.objects.filter(pk=chunk.pk).exists()


def test_the_search_tester_finds_only_the_tenants_chunks(client, trio, rows):
    login(client, trio.alice)
    mine = rows["mine"]
    page = client.post(
        f"/admin/rag/knowledgebase/{mine.pk}/search/",
        {"query": "paid holiday", "top_k": "10", "mode": "lexical"},
    ).content.decode()
    assert "Our holidays" in page and "25 days of paid holiday" in page
    assert "Their holidays" not in page
    invalid = client.post(f"/admin/rag/knowledgebase/{mine.pk}/search/", {"query": ""})
    assert invalid.status_code == 200 and "errorlist" in invalid.content.decode()


def test_the_search_tester_past_the_admins_request_budget_searches_nothing(
    client, trio, rows, rates
):
    rates("1/min", None)
    login(client, trio.alice)
    url = f"/admin/rag/knowledgebase/{rows['mine'].pk}/search/"
    asked = {"query": "paid holiday", "top_k": "10", "mode": "lexical"}
    assert "25 days of paid holiday" in client.post(url, asked).content.decode()
    refused = client.post(url, asked)
    page = refused.content.decode()
    assert refused.status_code == 429 and "Rate limit reached; retry in" in page
    assert "25 days of paid holiday" not in page


def test_members_cannot_reach_the_knowledge_admin(client, trio, rows):
    login(client, trio.bob)
    response = client.get(f"/admin/rag/knowledgebase/{rows['mine'].pk}/search/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
