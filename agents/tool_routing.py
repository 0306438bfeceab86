"""Tool routing's platform side (the runtime is agents/runtime/tool_routing.py): the
TOOL_ROUTING_* settings, the index of a tenant's tools, and the embedders an app offers.

- The index covers the tenant's registry (built-ins, definitions, MCP tools) and is kept
  per process per tenant configuration version, like the registry (tools.loader): built
  on the first routed run after a change, then shared by every run and thread.
- The cards' vectors are kept in the shared cache (Redis) under the embedder's name and
  the card's digest, for 30 days: a card embedded once is never embedded again, by any
  process, until its name, description, tags or examples change. A new version re-embeds
  only the cards that changed (about 600 a second with the local model on 2 cores).
- Embedders come from `register_routing_embedder` (rag registers MiniLM when the
  local-embeddings extra is installed, else its static model; agents never import rag).
  Without one, or with TOOL_ROUTING_SEMANTIC off, the ranking is lexical.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache

from agents.runtime.tool_routing import ToolRouting
from tools.loader import TenantTools
from tools.runtime.registry import ToolRegistry
from tools.runtime.routing import TextEmbedder, ToolCard, ToolIndex, card_vectors

logger = logging.getLogger(__name__)
VECTOR_TTL_S = 30 * 24 * 3600
LEXICAL = "lexical"

_embedders: dict[str, TextEmbedder] = {}  # "cards" (batches), "requests" (one at a time)
_indexes: dict[int, tuple[str, str, ToolIndex]] = {}  # tenant -> (version, ranking, index)
# One lock per tenant: embedding one tenant's new cards (seconds) holds up no other tenant.
_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


def register_routing_embedder(*, cards: TextEmbedder, requests: TextEmbedder) -> None:
    """Embed tool cards with `cards` (called with many texts) and each request with
    `requests` (called with one; its vectors must be in the same space)."""
    _embedders.update(cards=cards, requests=requests)


class _SharedVectors:
    """Card vectors in the shared cache (tools.runtime.routing.VectorCache)."""

    def get_many(self, keys: Any) -> dict[str, Any]:
        return cache.get_many(keys)

    def set_many(self, data: dict[str, Any]) -> None:
        cache.set_many(data, timeout=VECTOR_TTL_S)


def tool_routing(toolbox: TenantTools, tenant_id: int, offered: ToolRegistry) -> ToolRouting | None:
    """How a run offered `offered` is routed, or None when it has no more tools than
    TOOL_ROUTING_THRESHOLD (nothing is built then). Tools `offered` holds beyond the
    tenant's registry (an agent's knowledge tool, memory, final_answer, a caller's tools)
    stay offered every round. Building the index (once per configuration version) costs
    tens of milliseconds, plus embedding the cards not embedded before."""
    threshold = settings.TOOL_ROUTING_THRESHOLD
    if len(offered) <= threshold:
        return None
    index = tool_index(tenant_id, toolbox)
    return ToolRouting(
        index=index,
        threshold=threshold,
        top_k=settings.TOOL_ROUTING_TOP_K,
        pinned=frozenset(name for name in offered.names() if not toolbox.registry.has(name)),
        embedder=_embedders.get("requests") if index.semantic is not None else None,
        selection_model=settings.TOOL_ROUTING_SELECTION_MODEL,
    )


def tool_index(tenant_id: int, toolbox: TenantTools) -> ToolIndex:
    """The index of the tenant's tools for this configuration version (see the module)."""
    embedder = _embedders.get("cards") if settings.TOOL_ROUTING_SEMANTIC else None
    ranking = embedder.name if embedder is not None else LEXICAL
    kept = _indexes.get(tenant_id)
    if kept is not None and kept[:2] == (toolbox.version, ranking):
        return kept[2]
    with _tenant_lock(tenant_id):
        kept = _indexes.get(tenant_id)
        if kept is not None and kept[:2] == (toolbox.version, ranking):
            return kept[2]
        cards = [ToolCard.of(item) for item in toolbox.registry]
        vectors = None
        if embedder is not None:
            try:
                vectors = async_to_sync(card_vectors)(cards, embedder, _SharedVectors())
            except Exception:  # the model failed to load or run: rank lexically, say so
                logger.warning(
                    "tool routing for tenant %s ranks lexically: embedding the tool cards "
                    "failed", tenant_id, exc_info=True,
                )  # fmt: skip
        index = ToolIndex(cards, *vectors) if vectors is not None else ToolIndex(cards)
        _indexes[tenant_id] = (toolbox.version, ranking, index)
        return index


def _tenant_lock(tenant_id: int) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(tenant_id, threading.Lock())
