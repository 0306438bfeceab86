"""The embedder of a knowledge base: the process's one local model (it loads once, and also
embeds routed requests), a ProviderEmbedder per call over the connection's cached adapter,
None for full text."""

from __future__ import annotations

import threading

from django.conf import settings

from providers.services import adapter_for
from rag.models import Embedder as EmbedderKind
from rag.models import KnowledgeBase
from rag.runtime.embeddings import Embedder, EmbeddingError, ProviderEmbedder, TorchMiniLM
from rag.runtime.minilm_onnx import OnnxMiniLM

_local: OnnxMiniLM | TorchMiniLM | None = None
_lock = threading.Lock()


def local_embedder() -> OnnxMiniLM | TorchMiniLM:
    """The process's local model, on onnxruntime unless RAG_LOCAL_RUNTIME says torch
    (loaded lazily on its first embed)."""
    global _local
    with _lock:
        if _local is None:
            _local = TorchMiniLM() if settings.RAG_LOCAL_RUNTIME == "torch" else OnnxMiniLM()
        return _local


def embedder_for(knowledge_base: KnowledgeBase) -> Embedder | None:
    """None for a full-text knowledge base. Raises EmbeddingError when misconfigured.
    Reads the provider connection (one query unless select_related)."""
    if knowledge_base.embedder == EmbedderKind.LEXICAL:
        return None
    if knowledge_base.embedder == EmbedderKind.LOCAL:
        return local_embedder()
    connection = knowledge_base.provider_connection
    if connection is None:
        raise EmbeddingError("This knowledge base has no provider connection for embeddings.")
    adapter = adapter_for(connection)
    if not hasattr(adapter, "embed"):
        raise EmbeddingError(f"The connection {connection.name!r} offers no embeddings.")
    return ProviderEmbedder(
        adapter, model=knowledge_base.embedding_model, dimensions=knowledge_base.dimensions
    )
