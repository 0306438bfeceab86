"""Knowledge bases as context providers: their health check, and the knowledge bases behind
an agent's `knowledge_search`.

A knowledge base is healthy when its documents can be searched as configured: full-text
needs nothing; the static model, its table; the local model must be installed on this
server; a provider embedder must embed one short text now (a network call bounded by the
connection's timeout, made with no transaction open). The reason of a failure is ours,
never the provider's or a library's text (which may quote a request or a key).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from django.db.models import Q
from django.utils import timezone

from providers.runtime.errors import (
    AddressRefused,
    AuthenticationFailed,
    ModelNotFound,
    ProviderError,
    RateLimited,
    Timeout,
)
from rag.embedders import embedder_for, local_model_installed, static_embedder
from rag.models import Embedder, KnowledgeBase
from rag.runtime.embeddings import EmbeddingError
from tenancy import rls
from tools.context_providers import Health, OfferedToolRef, ProviderEntry, clean_reason

PROBE_TEXT = "health check"


def knowledge_base_probe(knowledge_base: KnowledgeBase) -> tuple[bool, str]:
    """(ok, reason) for the knowledge base's embedder now; reason "" when ok."""
    if knowledge_base.embedder == Embedder.LEXICAL:
        return True, ""
    if knowledge_base.embedder == Embedder.LOCAL:
        if not local_model_installed():
            return False, "the local embedding model is not installed on this server"
        return True, ""
    if knowledge_base.embedder == Embedder.STATIC:
        try:
            static_embedder().load()
        except EmbeddingError:
            return False, "the static embedding model's table could not be read on this server"
        return True, ""
    try:
        embedder = embedder_for(knowledge_base)
        async_to_sync(embedder.embed)([PROBE_TEXT])
    except (EmbeddingError, ProviderError) as exc:
        return False, _embedding_failure(knowledge_base, exc)
    return True, ""


def _embedding_failure(knowledge_base: KnowledgeBase, exc: Exception) -> str:
    cause = exc if isinstance(exc, ProviderError) else exc.__cause__
    connection = knowledge_base.provider_connection
    name = connection.name if connection is not None else "?"
    if connection is None:
        return "provider embeddings need a provider connection"
    said = {
        AuthenticationFailed: "refused the connection's credentials",
        AddressRefused: "has an address the platform may not reach",
        Timeout: "did not answer in time",
        ModelNotFound: f"does not know the model {knowledge_base.embedding_model!r}",
        RateLimited: "is limiting the rate of requests",
    }
    for kind, text in said.items():
        if isinstance(cause, kind):
            return clean_reason(f"the embedding provider ({name}) {text}",
                                secrets=[connection.api_key])  # fmt: skip
    if isinstance(cause, ProviderError):
        text = "cannot be reached or failed"
    else:
        text = "gave no usable embeddings"
    return clean_reason(f"the embedding provider ({name}) {text}", secrets=[connection.api_key])


def knowledge_base_check(knowledge_base: KnowledgeBase) -> KnowledgeBase:
    """Probe the knowledge base and record its health (one UPDATE)."""
    ok, reason = knowledge_base_probe(knowledge_base)
    knowledge_base.health_status = Health.OK if ok else Health.FAILING
    knowledge_base.health_reason = reason
    knowledge_base.health_checked_at = timezone.now()
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(
        health_status=knowledge_base.health_status,
        health_reason=reason,
        health_checked_at=knowledge_base.health_checked_at,
    )
    return knowledge_base


def knowledge_bases_check_health(now: datetime, every_s: int) -> dict[str, int]:
    """The periodic check: every knowledge base not checked for `every_s` seconds, of every
    tenant, each in its own tenant's scope."""
    cutoff = now - timedelta(seconds=every_s)
    with rls.owner():
        due = list(
            KnowledgeBase.objects.filter(
                Q(health_checked_at__isnull=True) | Q(health_checked_at__lte=cutoff)
            )
            .select_related("provider_connection")
            .order_by("health_checked_at", "pk")
        )
    counts = {"ok": 0, "failing": 0}
    for knowledge_base in due:
        with rls.tenant_scope(knowledge_base.tenant_id):
            checked = knowledge_base_check(knowledge_base)
        counts["ok" if checked.health_status == Health.OK else "failing"] += 1
    return counts


def knowledge_providers_of(
    tenant_id: int, agent_id: int | None, offered: Sequence[OfferedToolRef]
) -> list[ProviderEntry]:
    """The knowledge bases linked to the agent, when it is offered their search tool. One
    query, none otherwise."""
    tools = [tool.name for tool in offered if tool.source == "knowledge"]
    if not tools or agent_id is None:
        return []
    linked = KnowledgeBase.objects.filter(tenant_id=tenant_id, agents__id=agent_id)
    return [
        ProviderEntry(
            kind="knowledge_base",
            label="Knowledge base",
            id=knowledge_base.pk,
            name=knowledge_base.name,
            domains=list(knowledge_base.domains or ()),
            health=knowledge_base.health,
            tools=tools,
        )
        for knowledge_base in linked.order_by("name")
    ]
