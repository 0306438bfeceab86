"""The rag app's reads that the faces list and show: knowledge bases and their documents.
Services (services.py beside this) write; these only read. Each takes the tenant and never
returns another tenant's rows; one asked for by slug or id answers 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Length
from django.http import Http404

from rag.models import Document, DocumentStatus, KnowledgeBase
from tenancy.access import filter_given, get_for_tenant
from tenancy.models import Tenant

MAX_BIGINT = 2**63 - 1


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- knowledge bases ------------------------------------------------------------------------
def knowledge_bases_of(*, tenant: Tenant, embedder: str | None = None) -> QuerySet:
    """The tenant's knowledge bases with their agents (prefetched) and `document_total`;
    only those of `embedder` when given. Two queries when listed."""
    found = KnowledgeBase.objects.filter(tenant=tenant).prefetch_related("agents")
    found = found.annotate(document_total=Count("documents", distinct=True))
    return filter_given(found, embedder=embedder)


def knowledge_base_get(
    *, tenant: Tenant, slug_or_id: str, queryset: QuerySet | None = None
) -> KnowledgeBase:
    """The tenant's knowledge base by slug, else by numeric id; 404 otherwise. One query,
    two for a numeric id that is no slug."""
    found = KnowledgeBase.objects.filter(tenant=tenant) if queryset is None else queryset
    knowledge_base = found.filter(slug=slug_or_id).first()
    numeric = slug_or_id.isascii() and slug_or_id.isdigit() and int(slug_or_id) <= MAX_BIGINT
    if knowledge_base is None and numeric:
        knowledge_base = found.filter(pk=int(slug_or_id)).first()
    if knowledge_base is None:
        raise Http404("No such knowledge base.")
    return knowledge_base


def knowledge_base_shown(*, tenant: Tenant, slug_or_id: str) -> KnowledgeBase:
    """As knowledge_base_get, with what knowledge_bases_of adds (to show it)."""
    shown = knowledge_bases_of(tenant=tenant)
    return knowledge_base_get(tenant=tenant, slug_or_id=slug_or_id, queryset=shown)


def knowledge_base_document_count(knowledge_base: KnowledgeBase) -> int:
    """Its documents: `document_total` when knowledge_bases_of annotated it, else a query."""
    count = getattr(knowledge_base, "document_total", None)
    return knowledge_base.documents.count() if count is None else count


def knowledge_base_agent_slugs(knowledge_base: KnowledgeBase) -> list[str]:
    """The slugs of the agents that search it, sorted (prefetched by knowledge_bases_of)."""
    return sorted(agent.slug for agent in knowledge_base.agents.all())


# -- documents --------------------------------------------------------------------------------
def documents_of(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, status: str | None = None
) -> QuerySet:
    """The knowledge base's documents without their text (but its `content_size`); only
    those of `status` when given."""
    documents = (
        Document.objects.filter(tenant=tenant, knowledge_base=knowledge_base)
        .select_related("knowledge_base")
        .defer("content")
        .annotate(content_size=Length("content"))
    )
    return filter_given(documents, status=status)


def document_get(*, tenant: Tenant, knowledge_base: KnowledgeBase, document_id: Any) -> Document:
    """One document of the knowledge base, as documents_of shows it; 404 otherwise."""
    documents = documents_of(tenant=tenant, knowledge_base=knowledge_base)
    return get_for_tenant(documents, tenant, pk=_int(document_id))


def document_cited(*, tenant: Tenant, document_id: Any) -> Document:
    """The tenant's document with its knowledge base (a citation's source); 404 otherwise."""
    documents = Document.objects.select_related("knowledge_base")
    return get_for_tenant(documents, tenant, pk=_int(document_id))


def document_chunks(*, document: Document) -> QuerySet:
    """The document's chunks in order, without their vectors."""
    chunks = document.chunks.order_by("ordinal")
    return chunks.only("ordinal", "text", "heading_path", "page")


def knowledge_base_by_slug(*, tenant: Tenant, slug: str) -> KnowledgeBase:
    """The tenant's knowledge base `slug`; 404 otherwise. One query."""
    return get_for_tenant(KnowledgeBase, tenant, slug=slug)


def knowledge_bases_with_counts(*, tenant: Tenant) -> QuerySet:
    """The tenant's knowledge bases by name, with their agents and their documents counted:
    all (`document_total`), being ingested (`document_active`), failed (`document_failed`).
    Two queries."""
    active = Q(documents__status__in=[DocumentStatus.PENDING, DocumentStatus.PROCESSING])
    failed = Q(documents__status=DocumentStatus.FAILED)
    return (
        KnowledgeBase.objects.filter(tenant=tenant)
        .annotate(
            document_total=Count("documents", distinct=True),
            document_active=Count("documents", filter=active, distinct=True),
            document_failed=Count("documents", filter=failed, distinct=True),
        )
        .prefetch_related("agents")
        .order_by("name")
    )
