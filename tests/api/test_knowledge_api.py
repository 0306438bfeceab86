"""REST: knowledge bases, their documents and search (agentplatform/api/knowledge_api.py).

Documents are ingested by the real core: in-process with `rag.ingestion.ingest` where the
test runs in a transaction, by the session's Celery worker in the end-to-end test.
"""

from __future__ import annotations

import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from rag import services
from rag.ingestion import ingest
from rag.models import Chunk, Document, KnowledgeBase
from tests.api.test_resources import V1, as_key, assert_error, key_for
from tests.factories import make_agent

HOLIDAYS = "# Holidays\n\n## Paid leave\n\nEveryone gets 25 days of paid holiday a year."


def lexical(tenant, slug: str = "handbook", **extra) -> KnowledgeBase:
    return services.knowledge_base_save(
        tenant=tenant,
        changes={"slug": slug, "name": slug.title(), "embedder": "lexical", **extra},
    )


def ready_document(
    knowledge_base: KnowledgeBase, text: str = HOLIDAYS, title: str = ""
) -> Document:
    document = services.document_add(
        tenant=knowledge_base.tenant, knowledge_base=knowledge_base, title=title, text=text
    )
    assert ingest(document.pk) == "ready"
    return Document.objects.get(pk=document.pk)


def upload(client, key: str, path: str, data: dict):
    return client.post(V1 + path, data, HTTP_AUTHORIZATION=f"Bearer {key}")  # multipart


# -- knowledge bases -------------------------------------------------------------------------
def test_knowledge_bases_crud_by_slug_or_id(client, trio):
    make_agent(trio.acme, "support")
    api = as_key(client, trio.acme)
    created = api.post(
        "/knowledge-bases",
        {"slug": "handbook", "name": "Handbook", "embedder": "lexical", "agents": ["support"]},
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["embedder"] == "lexical" and body["dimensions"] is None
    assert body["agents"] == ["support"] and body["document_count"] == 0
    kb_id = body["id"]

    assert api.get("/knowledge-bases/handbook").json()["id"] == kb_id
    assert api.get(f"/knowledge-bases/{kb_id}").json()["slug"] == "handbook"
    listed = api.get("/knowledge-bases").json()
    assert [kb["slug"] for kb in listed["results"]] == ["handbook"]
    assert api.get("/knowledge-bases", {"embedder": "local"}).json()["results"] == []

    patched = api.patch("/knowledge-bases/handbook", {"chunk_size": 300, "agents": []})
    assert patched.status_code == 200, patched.content
    assert patched.json()["chunk_size"] == 300 and patched.json()["agents"] == []

    assert api.delete("/knowledge-bases/handbook").status_code == 204
    assert_error(api.get("/knowledge-bases/handbook"), 404, "not_found")
    assert not KnowledgeBase.objects.filter(tenant=trio.acme).exists()


def test_knowledge_base_validation_uses_the_model_rules(client, trio):
    api = as_key(client, trio.acme)
    bad = api.post(
        "/knowledge-bases",
        {
            "slug": "kb",
            "name": "KB",
            "embedder": "lexical",
            "chunk_size": 100,
            "chunk_overlap": 100,
        },
    )
    assert "chunk_overlap" in assert_error(bad, 400, "invalid")["details"]
    bad = api.post("/knowledge-bases", {"slug": "kb", "name": "KB", "embedder": "provider"})
    assert "provider_connection" in assert_error(bad, 400)["details"]
    bad = api.post("/knowledge-bases", {"slug": "Bad Slug!", "name": "KB"})
    assert "slug" in assert_error(bad, 400)["details"]
    bad = api.post("/knowledge-bases", {"slug": "kb", "name": "KB", "agents": ["nobody"]})
    assert "agents" in assert_error(bad, 400)["details"]
    bad = api.post("/knowledge-bases", {"slug": "kb", "name": "KB", "colour": "red"})
    assert assert_error(bad, 400)["details"] == {"colour": ["Unknown field."]}
    lexical(trio.acme, "kb")
    duplicate = api.post("/knowledge-bases", {"slug": "kb", "name": "Again", "embedder": "lexical"})
    assert_error(duplicate, 400)


def test_scopes(client, trio):
    lexical(trio.acme)
    reader = as_key(client, trio.acme, "read")
    assert reader.get("/knowledge-bases").status_code == 200
    assert_error(reader.post("/knowledge-bases", {"slug": "x", "name": "X"}), 403)
    assert_error(reader.delete("/knowledge-bases/handbook"), 403)
    assert_error(reader.post("/knowledge-bases/handbook/documents", {"text": "Hi."}), 403)
    assert reader.post("/knowledge-bases/handbook/search", {"query": "holiday"}).status_code == 200
    runner = as_key(client, trio.acme, "run")
    assert_error(runner.get("/knowledge-bases"), 403)
    assert_error(runner.post("/knowledge-bases/handbook/search", {"query": "holiday"}), 403)
    assert KnowledgeBase.objects.filter(tenant=trio.acme).count() == 1


def test_another_tenants_knowledge_bases_and_documents_are_404(client, trio):
    theirs = lexical(trio.globex, "secret")
    document = ready_document(theirs)
    mine = lexical(trio.acme, "handbook")
    api = as_key(client, trio.acme)
    for path in ("/knowledge-bases/secret", f"/knowledge-bases/{theirs.pk}"):
        assert_error(api.get(path), 404, "not_found")
        assert_error(api.patch(path, {"name": "Mine now"}), 404)
        assert_error(api.delete(path), 404)
        assert_error(api.get(path + "/documents"), 404)
        assert_error(api.post(path + "/documents", {"text": "Injected."}), 404)
        assert_error(api.post(path + "/search", {"query": "holiday"}), 404)
    for path in (
        f"/knowledge-bases/handbook/documents/{document.pk}",
        f"/knowledge-bases/secret/documents/{document.pk}",
    ):
        assert_error(api.get(path), 404)
        assert_error(api.delete(path), 404)
        assert_error(api.post(path + "/reingest"), 404)
    assert [kb["slug"] for kb in api.get("/knowledge-bases").json()["results"]] == ["handbook"]
    assert Document.objects.filter(pk=document.pk, title=document.title).exists()
    assert theirs.documents.count() == 1 and mine.documents.count() == 0
    assert KnowledgeBase.objects.get(pk=theirs.pk).name == "Secret"


def test_search_never_returns_another_tenants_chunks_even_for_identical_text(client, trio):
    theirs = lexical(trio.globex, "handbook")
    ready_document(theirs, title="Their holidays")
    mine = lexical(trio.acme, "handbook")
    document = ready_document(mine, title="Our holidays")
    api = as_key(client, trio.acme)
    response = api.post(
        "/knowledge-bases/handbook/search", {"query": "paid holiday", "top_k": 10, "mode": "hybrid"}
    )
    assert response.status_code == 200, response.content
    hits = response.json()["hits"]
    assert hits and {h["document_id"] for h in hits} == {document.pk}
    assert {h["knowledge_base_id"] for h in hits} == {mine.pk}
    assert hits[0]["document_title"] == "Our holidays"
    found = next(h for h in hits if "25 days" in h["text"])
    assert found["heading_path"].startswith("Holidays")
    their_chunks = set(Chunk.objects.filter(tenant=trio.globex).values_list("pk", flat=True))
    assert their_chunks and not their_chunks & {h["chunk_id"] for h in hits}


def test_search_input_is_validated(client, trio):
    lexical(trio.acme)
    api = as_key(client, trio.acme)
    assert "query" in assert_error(api.post("/knowledge-bases/handbook/search", {}), 400)["details"]
    bad = api.post("/knowledge-bases/handbook/search", {"query": "x", "top_k": 0, "mode": "magic"})
    assert set(assert_error(bad, 400)["details"]) == {"top_k", "mode"}
    empty = api.post("/knowledge-bases/handbook/search", {"query": "nothing matches this"})
    assert empty.status_code == 200 and empty.json()["hits"] == []


# -- documents --------------------------------------------------------------------------------
def test_documents_from_text_upload_and_url(client, trio):
    lexical(trio.acme)
    key = key_for(trio.acme, "read", "write")
    api = as_key(client, trio.acme, "read", "write")
    api.key = key
    text = api.post("/knowledge-bases/handbook/documents", {"title": "Holidays", "text": HOLIDAYS})
    assert text.status_code == 201, text.content
    assert text.json()["source"] == "text" and text.json()["status"] == "pending"
    assert text.json()["progress"] == 0 and text.json()["size"] == len(HOLIDAYS.encode())

    file = SimpleUploadedFile("notes.md", b"# Notes\n\nThe office opens at nine.", "text/markdown")
    uploaded = upload(client, key, "/knowledge-bases/handbook/documents", {"file": file})
    assert uploaded.status_code == 201, uploaded.content
    assert uploaded.json()["filename"] == "notes.md" and uploaded.json()["title"] == "notes.md"

    page = api.post("/knowledge-bases/handbook/documents", {"url": "https://example.com/a"})
    assert page.status_code == 201 and page.json()["source"] == "url"

    listed = api.get("/knowledge-bases/handbook/documents").json()["results"]
    assert [d["title"] for d in listed] == ["https://example.com/a", "notes.md", "Holidays"]
    assert all({"status", "progress", "error"} <= d.keys() for d in listed)
    pending = api.get("/knowledge-bases/handbook/documents", {"status": "pending"}).json()
    assert len(pending["results"]) == 3

    document_id = text.json()["id"]
    assert ingest(document_id) == "ready"
    ready = api.get(f"/knowledge-bases/handbook/documents/{document_id}").json()
    assert ready["status"] == "ready" and ready["progress"] == 100 and ready["chunk_count"] >= 1

    assert api.delete(f"/knowledge-bases/handbook/documents/{document_id}").status_code == 204
    assert_error(api.get(f"/knowledge-bases/handbook/documents/{document_id}"), 404)
    assert not Chunk.objects.filter(document_id=document_id).exists()


def test_exactly_one_source(client, trio):
    lexical(trio.acme)
    key = key_for(trio.acme)
    api = as_key(client, trio.acme)
    for body in ({}, {"title": "Nothing"}, {"text": "Hi.", "url": "https://example.com/"}):
        assert_error(api.post("/knowledge-bases/handbook/documents", body), 400, "invalid")
    file = SimpleUploadedFile("a.txt", b"Some text.", "text/plain")
    both = upload(client, key, "/knowledge-bases/handbook/documents", {"file": file, "text": "Hi."})
    assert_error(both, 400, "invalid")
    assert_error(api.post("/knowledge-bases/handbook/documents", {"text": "   "}), 400)
    assert_error(api.post("/knowledge-bases/handbook/documents", {"url": "ftp://x.test/"}), 400)
    assert not Document.objects.exists()


def test_documents_over_the_size_limit_are_413(client, trio, settings):
    settings.RAG_MAX_DOCUMENT_BYTES = 1000
    lexical(trio.acme)
    key = key_for(trio.acme)
    api = as_key(client, trio.acme)
    big_text = api.post("/knowledge-bases/handbook/documents", {"text": "word " * 400})
    assert_error(big_text, 413, "too_large")
    file = SimpleUploadedFile("big.txt", b"x" * 1001, "text/plain")
    big_file = upload(client, key, "/knowledge-bases/handbook/documents", {"file": file})
    assert_error(big_file, 413, "too_large")
    file = SimpleUploadedFile("ok.txt", b"x" * 1000, "text/plain")
    assert (
        upload(client, key, "/knowledge-bases/handbook/documents", {"file": file}).status_code
        == 201
    )
    assert Document.objects.count() == 1


def test_reingest_queues_the_document_again(client, trio, django_capture_on_commit_callbacks):
    knowledge_base = lexical(trio.acme)
    document = ready_document(knowledge_base)
    api = as_key(client, trio.acme)
    queued = []
    from rag import tasks

    original = tasks.ingest_document.delay
    tasks.ingest_document.delay = lambda *args: queued.append(args)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post(f"/knowledge-bases/handbook/documents/{document.pk}/reingest")
    finally:
        tasks.ingest_document.delay = original
    assert response.status_code == 202, response.content
    assert response.json()["id"] == document.pk
    assert queued == [(document.pk, True)]
    assert_error(api.post("/knowledge-bases/handbook/documents/999999/reingest"), 404)


# -- end to end, with the Celery worker -------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_pasted_document_is_ingested_by_the_worker_and_found(client, trio, celery_worker_process):
    api = as_key(client, trio.acme)
    assert (
        api.post(
            "/knowledge-bases", {"slug": "handbook", "name": "Handbook", "embedder": "lexical"}
        ).status_code
        == 201
    )
    created = api.post("/knowledge-bases/handbook/documents", {"text": HOLIDAYS})
    assert created.status_code == 201, created.content
    path = f"/knowledge-bases/handbook/documents/{created.json()['id']}"
    deadline = time.monotonic() + 30
    while (document := api.get(path).json())["status"] not in ("ready", "failed"):
        assert time.monotonic() < deadline, document
        time.sleep(0.2)
    assert document["status"] == "ready" and document["progress"] == 100, document
    hits = api.post("/knowledge-bases/handbook/search", {"query": "holiday"}).json()["hits"]
    assert hits and hits[0]["document_id"] == document["id"]

    again = api.post(path + "/reingest")
    assert again.status_code == 202
    deadline = time.monotonic() + 30
    while True:  # forced: processed again, and ready again
        document = api.get(path).json()
        if document["status"] == "ready" and document["updated_at"] != again.json()["updated_at"]:
            break
        assert time.monotonic() < deadline, document
        time.sleep(0.2)
