"""Celery tasks of the knowledge bases: thin wrappers of rag.ingestion."""

from __future__ import annotations

from celery import shared_task

from rag.ingestion import ingest
from rag.models import Document
from tenancy import rls


@shared_task(name="rag.ingest_document", acks_late=True, reject_on_worker_lost=True)
def ingest_document(document_id: int, force: bool = False) -> str:
    """Idempotent: an unchanged ready document is left alone (unless `force`), and a second
    delivery replaces the chunks with the same ones."""
    tenant_id = rls.tenant_id_of(Document, document_id)
    if tenant_id is None:
        return "missing"
    with rls.tenant_scope(tenant_id):
        return ingest(document_id, force=force)
