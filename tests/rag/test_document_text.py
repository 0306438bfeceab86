"""A document's text from its stored chunks: every chunking of a text gives it back."""

from __future__ import annotations

import random

import pytest

from rag.runtime.chunking import PageSpan, chunk_text
from rag.runtime.document_text import StoredChunk, document_text

WORDS = "alpha beta gamma the of and. report, figure 1.2 (see) - * ok! x x x".split()  # noqa: SIM905


def stored(chunks) -> list[StoredChunk]:
    """What the database keeps of each chunk (no offsets, no overlap)."""
    return [StoredChunk(c.text, c.heading_path, c.page) for c in chunks]


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 1500)):
        roll = rng.random()
        if roll < 0.02:
            parts.append(f"\n\n# Heading {rng.randint(1, 2)}\n")  # repeats too
        elif roll < 0.05:
            parts.append("\n\n")
        else:
            parts.append(rng.choice(WORDS) + " ")
    return "".join(parts)


@pytest.mark.parametrize("seed", range(8))
def test_the_chunks_give_back_the_text_they_were_cut_from(seed):
    rng = random.Random(seed)
    for _ in range(40):
        source = random_text(rng)
        size = rng.choice([50, 60, 100, 400])
        overlap = rng.choice([0, 5, 20, size - 1])
        cut = len(source) // 2
        pages = (PageSpan(1, 0, cut), PageSpan(2, cut, len(source))) if rng.random() < 0.3 else ()
        chunks = chunk_text(source, size=size, overlap=overlap, pages=pages)
        assert document_text(stored(chunks), overlap_tokens=overlap) == source


def test_a_heading_repeated_at_once_is_kept_twice():
    source = "# Notes\n\n\n# Notes\n\n\nText after them."
    chunks = chunk_text(source, size=50, overlap=10)
    assert len(chunks) > 1 and document_text(stored(chunks), overlap_tokens=10) == source


def test_chunk_settings_changed_since_ingestion_still_remove_the_overlap():
    source = " ".join(f"word{i}." for i in range(400))
    chunks = chunk_text(source, size=60, overlap=20)
    assert document_text(stored(chunks), overlap_tokens=5) == source
