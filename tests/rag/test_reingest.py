"""A reingestion answers with what it did, whenever the worker gets to the document."""

from __future__ import annotations

import pytest

from rag import services
from rag.models import DocumentStatus
from rag.tasks import ingest_document

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reingest_answers_pending_even_when_a_worker_finished_it_already(
    trio, lexical_kb, monkeypatch
):
    """Outside a transaction the ingestion is queued at once, and a quick worker may make
    the document ready again before the service returns: the service still answers with
    the document as it marked it. Here the ingestion runs in the service's own call, the
    quickest a worker could be."""

    def ingested_at_once(document_ids: list[int], *, force: bool = False) -> None:
        for document_id in document_ids:
            ingest_document(document_id, force)

    monkeypatch.setattr(services, "_queue", ingested_at_once)
    document = services.document_add(
        tenant=trio.acme, knowledge_base=lexical_kb, title="Leave", text="# Leave\n\n25 days."
    )
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, document.error

    answered = services.document_reingest(tenant=trio.acme, document=document)

    assert answered.status == DocumentStatus.PENDING
    answered.refresh_from_db()
    assert answered.status == DocumentStatus.READY  # (the worker's doing, meanwhile)
