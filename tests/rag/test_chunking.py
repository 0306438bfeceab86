"""rag/runtime/chunking.py: bounded sizes, overlap, headings and pages, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.runtime.chunking import Chunk, PageSpan, chunk_text, count_tokens

DATA = Path(__file__).resolve().parent.parent / "data" / "rag"

PLAIN = " ".join(
    f"Sentence number {i} talks about topic {i % 7}, and it goes on for a while."
    for i in range(300)
)


def reassembled(chunks: list[Chunk]) -> str:
    return "".join(c.text[c.overlap :] for c in chunks)


def check_invariants(source: str, chunks: list[Chunk], size: int) -> None:
    assert reassembled(chunks) == source
    for index, chunk in enumerate(chunks):
        assert chunk.ordinal == index
        assert source[chunk.start : chunk.end] == chunk.text
        assert 0 < chunk.token_count == count_tokens(chunk.text) <= size
        if index:
            previous = chunks[index - 1]
            assert chunk.start + chunk.overlap == previous.end  # contiguous new text
            assert previous.text.endswith(chunk.text[: chunk.overlap])


def test_counting_tokens_counts_words_and_punctuation():
    assert count_tokens("Don't panic!") == 5
    assert count_tokens("") == 0


@pytest.mark.parametrize(("size", "overlap"), [(50, 10), (120, 30), (400, 60), (60, 0)])
def test_plain_text_chunks_stay_within_bounds_and_lose_nothing(size, overlap):
    chunks = chunk_text(PLAIN, size=size, overlap=overlap)
    check_invariants(PLAIN, chunks, size)
    assert len(chunks) > 1
    # Greedy packing: every chunk but the last is reasonably full.
    assert all(c.token_count > size // 2 for c in chunks[:-1])


def test_consecutive_chunks_overlap_by_about_the_overlap():
    chunks = chunk_text(PLAIN, size=100, overlap=20)
    assert chunks[0].overlap == 0
    for chunk in chunks[1:]:
        assert 10 <= count_tokens(chunk.text[: chunk.overlap]) <= 20


def test_no_overlap_when_asked_for_none():
    chunks = chunk_text(PLAIN, size=80, overlap=0)
    assert all(c.overlap == 0 for c in chunks)
    assert "".join(c.text for c in chunks) == PLAIN


def test_markdown_chunks_carry_their_heading_path():
    source = (DATA / "solar-system.md").read_text()
    chunks = chunk_text(source, size=120, overlap=20)
    check_invariants(source, chunks, 120)
    by_heading = {c.heading_path: c for c in chunks}
    jupiter = by_heading["The Solar System > The outer planets > Jupiter"]
    assert "Great Red Spot" in jupiter.text
    assert jupiter.text.startswith("### Jupiter")
    assert by_heading["The Solar System > The Sun"].text.startswith("## The Sun")
    assert chunks[0].heading_path == "The Solar System"
    # A chunk never spans two sections, and never overlaps into another section.
    for chunk in chunks:
        assert chunk.text.count("\n#") == 0


def test_a_long_section_is_split_with_overlap_under_the_same_heading():
    source = "# Intro\n\nShort.\n\n## Long part\n\n" + PLAIN + "\n\n## After\n\nThe end.\n"
    chunks = chunk_text(source, size=100, overlap=25)
    check_invariants(source, chunks, 100)
    long_part = [c for c in chunks if c.heading_path == "Intro > Long part"]
    assert len(long_part) > 3
    assert long_part[0].overlap == 0
    assert all(c.overlap > 0 for c in long_part[1:])
    assert chunks[-1].heading_path == "Intro > After"
    assert chunks[-1].overlap == 0  # no overlap across a heading


def test_headings_inside_code_fences_are_not_headings():
    source = "# Real\n\nText.\n\n```\n# not a heading\n```\n\nMore text.\n"
    chunks = chunk_text(source, size=100, overlap=10)
    assert {c.heading_path for c in chunks} == {"Real"}


def test_pages_are_carried_and_chunks_never_cross_a_page():
    pages_text = [f"Page {n} begins. " + PLAIN[: 1500 + 100 * n] for n in range(1, 4)]
    source = ""
    spans = []
    for number, text in enumerate(pages_text, start=1):
        if source:
            source += "\n\n"
        spans.append(PageSpan(number, len(source), len(source) + len(text)))
        source += text
    chunks = chunk_text(source, size=80, overlap=15, pages=spans)
    check_invariants(source, chunks, 80)
    assert {c.page for c in chunks} == {1, 2, 3}
    for chunk in chunks:
        span = spans[chunk.page - 1]
        new_start = chunk.start + chunk.overlap
        assert span.start <= new_start or chunk.page == 1
        assert chunk.start >= spans[chunk.page - 1].start or chunk.page == 1
    firsts = [next(c for c in chunks if c.page == n) for n in (2, 3)]
    assert all(c.text.startswith(f"Page {c.page} begins.") and c.overlap == 0 for c in firsts)


def test_a_word_longer_than_a_chunk_is_cut_between_tokens():
    source = "start " + "-" * 500 + " end"
    chunks = chunk_text(source, size=60, overlap=5)
    check_invariants(source, chunks, 60)


def test_whitespace_and_empty_input():
    assert chunk_text("", size=50, overlap=5) == []
    chunks = chunk_text("   \n\n  ", size=50, overlap=5)
    assert reassembled(chunks) == "   \n\n  "


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="overlap"):
        chunk_text("x", size=10, overlap=10)
    with pytest.raises(ValueError, match="size"):
        chunk_text("x", size=0, overlap=0)


def test_headings_are_read_in_linear_time_whatever_their_line():
    import time

    started = time.perf_counter()
    chunks = chunk_text("# a" + " " * 200_000 + "x\nbody\n## Closed ##  \nmore", size=50, overlap=0)
    assert time.perf_counter() - started < 2  # (the old pattern: cubic, hours at this size)
    assert chunks[-1].heading_path == "a" + " " * 200_000 + "x > Closed"
