"""Ingesting one document: fetch (URL) -> extract -> chunk -> embed in batches -> replace.

Progress: extract done 10, chunks made 20, embedding 20..90 batch by batch, stored 100
(status ready). Each progress step is one UPDATE in autocommit, so other connections see
it. No transaction is held across fetching or embedding; the document's chunks are
replaced (delete + insert) in one short transaction at the end, so a search sees either
the old chunks or the new ones, never a mix.

Bad input (unreadable file, unreachable or refused URL, embedding failure) marks this
document failed with a message for the tenant; its previous chunks, if any, stay, and
nothing else is touched. Unexpected errors are marked too, then re-raised to be logged.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents import quotas
from rag.embedders import embedder_for
from rag.models import Chunk, Document, DocumentStatus, KnowledgeBase, Source
from rag.runtime.chunking import chunk_text
from rag.runtime.embeddings import EmbeddingError
from rag.runtime.extract import ExtractionError, extract
from tools.loader import egress_client
from tools.runtime.egress import EgressError, ResponseTooLarge

logger = logging.getLogger(__name__)

EXTRACTED, CHUNKED, EMBEDDED = 10, 20, 90


class IngestionError(Exception):
    """This document cannot be ingested; `str(exc)` is shown to the tenant."""


def checksum_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ingest(document_id: int, *, force: bool = False) -> str:
    """Ingest one document; returns "ready", "unchanged", "failed" or "missing". Idempotent:
    an unchanged ready document (same checksum) is left alone unless `force`."""
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "missing"
    if (
        not force
        and document.source != Source.URL
        and _unchanged(document, checksum_of(bytes(document.content)))
    ):
        return "unchanged"
    _update(document_id, status=DocumentStatus.PROCESSING, progress=0, error="")
    document.status, document.progress, document.error = DocumentStatus.PROCESSING, 0, ""
    try:
        return _ingest(document, force=force)
    except (IngestionError, ExtractionError, EmbeddingError, quotas.QuotaExceeded) as exc:
        _update(document_id, status=DocumentStatus.FAILED, error=str(exc))
        return "failed"
    except Exception:
        logger.exception("ingesting document %s failed", document_id)
        _update(
            document_id,
            status=DocumentStatus.FAILED,
            error="An internal error stopped the ingestion (it is logged); try again later.",
        )
        raise


def _ingest(document: Document, *, force: bool) -> str:
    knowledge_base = KnowledgeBase.objects.select_related("provider_connection").get(
        pk=document.knowledge_base_id
    )
    data = bytes(document.content)
    content_type = document.content_type
    if document.source == Source.URL:
        data, content_type = fetch_url(document.url)
    checksum = checksum_of(data)
    # Stored bytes were compared in `ingest` already; fetched ones only now.
    if not force and document.source == Source.URL and _unchanged(document, checksum):
        return "unchanged"
    extracted = extract(
        data,
        filename=document.filename or _url_path(document.url),
        content_type=content_type,
        max_bytes=settings.RAG_MAX_DOCUMENT_BYTES,
    )
    _update(document.pk, progress=EXTRACTED)
    chunks = chunk_text(
        extracted.text,
        size=knowledge_base.chunk_size,
        overlap=knowledge_base.chunk_overlap,
        pages=extracted.pages,
    )
    _update(document.pk, progress=CHUNKED)
    embeddings = embed_chunks(
        knowledge_base,
        [_embedding_input(c.heading_path, c.text) for c in chunks],
        progress=lambda value: _update(document.pk, progress=value),
    )
    dimensions = len(embeddings[0]) if embeddings and embeddings[0] is not None else None
    rows = [
        Chunk(
            tenant_id=document.tenant_id,
            knowledge_base_id=knowledge_base.pk,
            document_id=document.pk,
            ordinal=c.ordinal,
            text=c.text,
            token_count=c.token_count,
            heading_path=c.heading_path[:1000],
            page=c.page,
            embedding=embedding,
            dimensions=dimensions if embedding is not None else None,
        )
        for c, embedding in zip(chunks, embeddings, strict=True)
    ]
    title_update = {}
    if not document.title and extracted.title:
        title_update["title"] = extracted.title[:300]
    with transaction.atomic():
        # The document may have been deleted meanwhile: then there is nothing to store.
        locked = Document.objects.select_for_update().filter(pk=document.pk).first()
        if locked is None:
            return "missing"
        Chunk.objects.filter(document_id=document.pk).delete()
        Chunk.objects.bulk_create(rows, batch_size=500)
        Document.objects.filter(pk=document.pk).update(
            status=DocumentStatus.READY,
            progress=100,
            error="",
            checksum=checksum,
            chunk_count=len(rows),
            token_count=sum(c.token_count for c in chunks),
            updated_at=timezone.now(),
            **title_update,
        )
    return "ready"


def _unchanged(document: Document, checksum: str) -> bool:
    """Whether the chunks stored are those of the bytes with this checksum (written only by
    a successful ingestion). If so, a document marked pending (or failed since) is ready
    again, and nothing else is written."""
    if not document.checksum or checksum != document.checksum:
        return False
    if document.status != DocumentStatus.READY or document.progress != 100 or document.error:
        _update(document.pk, status=DocumentStatus.READY, progress=100, error="")
    return True


def _embedding_input(heading_path: str, text: str) -> str:
    """What is embedded for a chunk: its heading path gives the passage its context."""
    return f"{heading_path}\n{text}" if heading_path else text


def embed_chunks(
    knowledge_base: KnowledgeBase,
    texts: list[str],
    *,
    progress: Callable[[int], None] | None = None,
) -> list[list[float] | None]:
    """One vector per text (None each for a full-text knowledge base), in batches of
    RAG_EMBED_BATCH_SIZE, reporting progress from CHUNKED to EMBEDDED. The first vectors of
    a provider knowledge base without dimensions fix its dimensions. A provider's batches are
    each held against the tenant's quotas (QuotaExceeded stops at the first refused)."""
    embedder = embedder_for(knowledge_base, quotas.Meter(knowledge_base.tenant_id))
    if embedder is None or not texts:
        return [None] * len(texts)
    batch_size = max(1, settings.RAG_EMBED_BATCH_SIZE)

    async def embed_all() -> list[list[float] | None]:
        # One event loop for every batch: a provider embedder keeps its client (and its
        # connection) from one batch to the next.
        vectors: list[list[float] | None] = []
        for start in range(0, len(texts), batch_size):
            vectors.extend(await embedder.embed(texts[start : start + batch_size]))
            if progress is not None:
                done = min(start + batch_size, len(texts)) / len(texts)
                await sync_to_async(progress)(CHUNKED + int((EMBEDDED - CHUNKED) * done))
        return vectors

    vectors = async_to_sync(embed_all)()
    found = len(vectors[0]) if vectors and vectors[0] is not None else None
    if knowledge_base.dimensions is None and found is not None:
        KnowledgeBase.objects.filter(pk=knowledge_base.pk, dimensions__isnull=True).update(
            dimensions=found
        )
        knowledge_base.refresh_from_db(fields=["dimensions"])
    if found is not None and knowledge_base.dimensions != found:
        raise EmbeddingError(
            f"The model returned {found}-dimensional vectors; this knowledge base holds "
            f"{knowledge_base.dimensions}-dimensional ones."
        )
    return vectors


def fetch_url(url: str) -> tuple[bytes, str]:
    """The body and content type of `url`, through the guarded egress client (private
    addresses refused unless EGRESS_ALLOWLIST allows them; bounded time and size)."""
    client = egress_client(tuple(settings.EGRESS_ALLOWLIST))
    limit = settings.RAG_MAX_DOCUMENT_BYTES
    try:
        response = async_to_sync(client.request)(
            "GET",
            url,
            headers={
                "accept": "text/html, text/plain, text/markdown, application/pdf;q=0.9, */*;q=0.1"
            },
            timeout_s=float(settings.RAG_URL_TIMEOUT_S),
            max_bytes=limit,
        )
    except ResponseTooLarge:
        raise IngestionError(
            f"The page at {url} is larger than the limit of {limit / 2**20:.1f} MiB."
        ) from None
    except EgressError as exc:
        raise IngestionError(f"Cannot fetch {url}: {exc}") from None
    if response.status_code >= 400:
        raise IngestionError(
            f"Cannot fetch {url}: the server answered HTTP {response.status_code}."
        )
    headers = {k.lower(): v for k, v in response.headers.items()}
    return response.content, headers.get("content-type", "")


def _url_path(url: str) -> str:
    return urlsplit(url).path if url else ""


def _update(document_id: int, **fields) -> None:
    Document.objects.filter(pk=document_id).update(updated_at=timezone.now(), **fields)
