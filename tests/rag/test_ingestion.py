"""Ingestion through a real Celery worker: progress, idempotence, atomic replacement, and
bad input failing only its own document."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import Http404

from rag import services
from rag.models import Chunk, Document, DocumentStatus
from rag.tasks import ingest_document
from tests.rag.conftest import provider_kb, wait_for
from tests.rag.pdfs import make_pdf
from tests.tools.local_server import LocalServer, Reply

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker_process"),
]

PARAGRAPH = "The quick brown fox jumps over the lazy dog near the river bank today. "
LONG_TEXT = "# Guide\n\n" + "\n\n".join(
    f"## Part {n}\n\n" + PARAGRAPH * 6 for n in range(1, 41)
)  # about 40 sections of ~90 tokens: 80 chunks at size 60 -> two embedding batches


def test_statuses_and_progress_advance_until_ready(trio, slow_embeddings):
    kb = provider_kb(trio.acme, slow_embeddings.url)
    document = services.document_add(tenant=trio.acme, knowledge_base=kb, text=LONG_TEXT * 2)
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = Document.objects.values_list("status", "progress").get(pk=document.pk)
        if not seen or seen[-1] != row:
            seen.append(row)
        if row[0] in ("ready", "failed"):
            break
        time.sleep(0.01)
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, document.error
    assert seen[-1] == ("ready", 100)
    processing = [progress for status, progress in seen if status == "processing"]
    assert any(20 < p < 90 for p in processing), seen  # between embedding batches
    assert processing == sorted(processing)  # only forward
    assert len(slow_embeddings.requests) >= 3
    assert document.chunk_count == Chunk.objects.filter(document=document).count() > 100
    assert document.token_count > 0
    kb.refresh_from_db()
    assert kb.dimensions == 8  # set by the first vectors
    assert set(Chunk.objects.filter(document=document).values_list("dimensions", flat=True)) == {8}
    hits = services.search(tenant=trio.acme, knowledge_base_ids=[kb.pk], query="fox river", top_k=3)
    assert hits and hits[0].document_id == document.pk


def test_reingesting_an_unchanged_document_does_nothing(trio, lexical_kb):
    document = services.document_add(
        tenant=trio.acme,
        knowledge_base=lexical_kb,
        title="Leave",
        text="# Leave\n\n25 days a year.",
    )
    document = wait_for(document)
    assert document.status == DocumentStatus.READY, document.error
    before = list(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    updated_at = document.updated_at
    assert ingest_document.delay(document.pk).get(timeout=30) == "unchanged"
    document.refresh_from_db()
    assert document.updated_at == updated_at  # not even the row was written
    assert list(Chunk.objects.filter(document=document).values_list("pk", flat=True)) == before

    document = services.document_reingest(tenant=trio.acme, document=document)
    assert document.status == DocumentStatus.PENDING
    document = wait_for(document)
    assert (document.status, document.progress, document.chunk_count) == ("ready", 100, len(before))
    assert list(Chunk.objects.filter(document=document).values_list("pk", flat=True)) == before


def test_a_changed_document_is_replaced_atomically(trio, slow_embeddings):
    old = "# Old\n\n" + "\n\n".join(f"Old paragraph {n}. " + PARAGRAPH * 4 for n in range(30))
    new = "# New\n\n" + "\n\n".join(f"New paragraph {n}. " + PARAGRAPH * 5 for n in range(40))
    site = LocalServer()
    site.route("GET", "/page", Reply(body=old.encode(), headers={"content-type": "text/markdown"}))
    kb = provider_kb(trio.acme, slow_embeddings.url)
    try:
        document = services.document_add(
            tenant=trio.acme, knowledge_base=kb, url=site.url + "/page"
        )
        document = wait_for(document)
        assert document.status == DocumentStatus.READY, document.error
        old_count = document.chunk_count
        old_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
        assert ingest_document.delay(document.pk).get(timeout=30) == "unchanged"  # same bytes

        site.route(
            "GET", "/page", Reply(body=new.encode(), headers={"content-type": "text/markdown"})
        )
        observed: list[tuple[int, frozenset[str]]] = []
        stop = threading.Event()

        def watch() -> None:  # what searches see meanwhile: all old or all new, never a mix
            from django.db import connection

            while not stop.is_set():
                texts = list(
                    Chunk.objects.filter(document_id=document.pk).values_list("text", flat=True)
                )
                kinds = frozenset(
                    "old" if "Old paragraph" in t else "new" if "New paragraph" in t else "head"
                    for t in texts
                )
                observed.append((len(texts), kinds - {"head"}))
                time.sleep(0.005)
            connection.close()

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            services.document_reingest(tenant=trio.acme, document=document)
            document = wait_for(Document.objects.get(pk=document.pk))
            deadline = time.monotonic() + 5  # let the watcher sample the new state too
            while not any(k == {"new"} for _, k in observed) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            watcher.join()
        assert document.status == DocumentStatus.READY, document.error
        new_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
        assert new_ids and not (new_ids & old_ids)
        assert document.chunk_count == len(new_ids) != old_count
        for count, kinds in observed:
            assert kinds in ({"old"}, {"new"}), (count, kinds)
            assert count == (old_count if kinds == {"old"} else len(new_ids))
        states = [kinds for _, kinds in observed]
        switches = [k for i, k in enumerate(states) if i == 0 or k != states[i - 1]]
        assert switches == [{"old"}, {"new"}]  # all old, then all new, once
    finally:
        site.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_bad_input_fails_only_its_document_with_a_clear_message(trio, lexical_kb, settings):
    good = wait_for(
        services.document_add(
            tenant=trio.acme, knowledge_base=lexical_kb, text="# Good\n\nFine text."
        )
    )
    assert good.status == DocumentStatus.READY
    good_chunks = list(Chunk.objects.filter(document=good).values_list("pk", "text"))
    big = LocalServer()
    big.route(
        "GET",
        "/big",
        Reply(
            body=b"a" * (settings.RAG_MAX_DOCUMENT_BYTES + 1),
            headers={"content-type": "text/plain"},
        ),
    )

    def upload(name: str, data: bytes, content_type: str = "application/octet-stream") -> Document:
        file = SimpleUploadedFile(name, data, content_type=content_type)
        return services.document_add(tenant=trio.acme, knowledge_base=lexical_kb, upload=file)

    try:
        cases = {
            "corrupt pdf": (
                upload("broken.pdf", b"%PDF-1.7\n1 0 obj << /Type /Cat", "application/pdf"),
                "The PDF could not be read",
            ),
            "binary": (
                upload("photo.bin", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01"),
                "binary file",
            ),
            "empty": (upload("empty.txt", b"", "text/plain"), "The document is empty."),
            "over the limit": (
                services.document_add(
                    tenant=trio.acme, knowledge_base=lexical_kb, url=big.url + "/big"
                ),
                "larger than the limit of 10.0 MiB",
            ),
            "unreachable": (
                services.document_add(
                    tenant=trio.acme,
                    knowledge_base=lexical_kb,
                    url=f"http://127.0.0.1:{_closed_port()}/x",
                ),
                "Connection refused",
            ),
            "private": (
                services.document_add(
                    tenant=trio.acme, knowledge_base=lexical_kb, url="http://10.1.2.3/internal"
                ),
                "private",
            ),
        }
        for name, (document, message) in cases.items():
            document = wait_for(document)
            assert document.status == DocumentStatus.FAILED, name
            assert message in document.error, (name, document.error)
            assert not Chunk.objects.filter(document=document).exists()
    finally:
        big.close()
    good.refresh_from_db()
    assert good.status == DocumentStatus.READY
    assert list(Chunk.objects.filter(document=good).values_list("pk", "text")) == good_chunks


def test_a_pdf_is_ingested_with_its_pages(trio, lexical_kb):
    pdf = make_pdf(
        ["Alpha page about apples.", "Beta page about bananas.", "Gamma page about cherries."]
    )
    file = SimpleUploadedFile("fruit.pdf", pdf, content_type="application/pdf")
    document = wait_for(
        services.document_add(tenant=trio.acme, knowledge_base=lexical_kb, upload=file)
    )
    assert document.status == DocumentStatus.READY, document.error
    assert document.title == "fruit.pdf"
    hits = services.search(tenant=trio.acme, knowledge_base_ids=[lexical_kb.pk], query="bananas")
    assert [(h.page, h.document_title) for h in hits] == [(2, "fruit.pdf")]


def test_document_add_checks_its_sources_and_tenant(trio, lexical_kb, settings):
    with pytest.raises(ValidationError, match="exactly one source"):
        services.document_add(tenant=trio.acme, knowledge_base=lexical_kb)
    with pytest.raises(ValidationError, match="exactly one source"):
        services.document_add(
            tenant=trio.acme, knowledge_base=lexical_kb, text="a", url="https://example.com"
        )
    with pytest.raises(ValidationError, match="http or https"):
        services.document_add(tenant=trio.acme, knowledge_base=lexical_kb, url="file:///etc/passwd")
    settings.RAG_MAX_DOCUMENT_BYTES = 100
    with pytest.raises(ValidationError, match="larger than the limit"):
        services.document_add(
            tenant=trio.acme,
            knowledge_base=lexical_kb,
            upload=SimpleUploadedFile("a.txt", b"x" * 101),
        )
    with pytest.raises(Http404):
        services.document_add(tenant=trio.globex, knowledge_base=lexical_kb, text="hello")
    assert not Document.objects.exists()
