"""Knowledge bases in the configuration document: their settings and the agents that search
them (never their documents), registered as a section of the document from
`RagConfig.ready` — agents never import rag."""

from __future__ import annotations

from typing import Any

from agents.config_document import DocField, DocSection, reference_field
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


KNOWLEDGE_BASES = DocSection(
    "knowledge_bases",
    "slug",
    KnowledgeBase,
    (
        DocField("slug", "slug"),
        DocField("name", "name"),
        DocField("description", "description"),
        DocField("embedder", "embedder"),
        reference_field("connection", "provider_connection", "connections"),
        _provider_only("embedding_model", ""),
        _provider_only("dimensions", None),
        DocField("chunk_size", "chunk_size"),
        DocField("chunk_overlap", "chunk_overlap"),
        DocField("domains", "domains", read=lambda k: list(k.domains or [])),
        DocField(
            "agents",
            "agents",
            read=_agent_slugs,
            write=lambda slugs, refs: [refs.agents[slug] for slug in slugs],
            refers_to="agents",
        ),
    ),
    save=knowledge_base_save,
    delete=knowledge_base_delete,
    noun="knowledge_base",
    related=("provider_connection",),
    prefetch=("agents",),
)
