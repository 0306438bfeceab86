"""Celery tasks of the knowledge bases: thin wrappers of rag.ingestion."""

from __future__ import annotations

from celery import shared_task

from rag.ingestion import ingest


@shared_task(name="rag.ingest_document", acks_late=True, reject_on_worker_lost=True)
def ingest_document(document_id: int, force: bool = False) -> str:
    """Idempotent: an unchanged ready document is left alone (unless `force`), and a second
    delivery replaces the chunks with the same ones."""
    return ingest(document_id, force=force)
