"""Knowledge bases in the configuration document: their settings and the agents that search
them (never their documents), registered as a section of the document from
`RagConfig.ready` — agents never import rag."""

from __future__ import annotations

from typing import Any

from agents.config_document import DocField, DocSection, Refs, name_of
from rag.models import Embedder, KnowledgeBase
from rag.services import knowledge_base_delete, knowledge_base_save


def _agent_slugs(base: KnowledgeBase) -> list[str]:
    """In slug order: those a save is about to link (`knowledge_base_save`), else stored."""
    pending = getattr(base, "pending_agents", None)
    if pending is not None:
        return sorted(agent.slug for agent in pending)
    if base.pk is None:
        return []
    return sorted(agent.slug for agent in base.agents.all())


def _provider_only(attr: str, empty: Any) -> DocField:
    """A setting only provider embeddings take (the others fix it themselves)."""
    return DocField(
        attr,
        attr,
        read=lambda base: getattr(base, attr) if base.embedder == Embedder.PROVIDER else empty,
    )


def _save(tenant, base, changes, entry, refs: Refs) -> KnowledgeBase:
    return knowledge_base_save(
        tenant=tenant, knowledge_base=base, changes=changes, graph_checked=True
    )


KNOWLEDGE_BASES = DocSection(
    "knowledge_bases",
    "slug",
    KnowledgeBase,
    (
        DocField("slug", "slug"),
        DocField("name", "name"),
        DocField("description", "description"),
        DocField("embedder", "embedder"),
        DocField(
            "connection",
            "provider_connection",
            read=name_of("provider_connection"),
            write=lambda value, refs: refs.connections.get(value) if value else None,
        ),
        _provider_only("embedding_model", ""),
        _provider_only("dimensions", None),
        DocField("chunk_size", "chunk_size"),
        DocField("chunk_overlap", "chunk_overlap"),
        DocField(
            "agents",
            "agents",
            read=_agent_slugs,
            write=lambda slugs, refs: [refs.agents[slug] for slug in slugs],
        ),
    ),
    rows=lambda tenant: (
        KnowledgeBase.objects.filter(tenant=tenant)
        .select_related("provider_connection")
        .prefetch_related("agents")
        .order_by("slug")
    ),
    save=_save,
    delete=lambda tenant, base: knowledge_base_delete(tenant=tenant, knowledge_base=base),
)
