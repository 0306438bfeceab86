"""Splitting a document's text into overlapping, token-bounded chunks.

The text is first cut into *segments* at markdown headings (``#`` .. ``######`` lines
outside code fences) and at page boundaries; a chunk never crosses a segment, so each
chunk has one heading path and one page. A segment longer than `size` tokens is split
recursively: on blank lines (paragraphs), then lines, then sentence ends, then
whitespace, and as a last resort between tokens. The pieces are packed greedily into
chunks of at most `size` tokens; each chunk after the first of its segment starts with up
to `overlap` tokens taken from the end of the previous chunk.

Nothing is lost or rewritten: every chunk is the exact slice ``source[start:end]`` and
its first `overlap` characters are the ones the previous chunk ends with, so::

    "".join(c.text[c.overlap :] for c in chunks) == source

Tokens are *estimated* with a regex: each run of word characters and each other
non-space character counts one (``"Don't panic!"`` is 5). For English prose this is
within about 15% of a BPE tokenizer's count, and it is additive over whitespace cuts,
which is what keeps the size bound exact for this estimate.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

TOKEN = re.compile(r"\w+|[^\w\s]")
# Linear on any line (the closing `#`s are stripped after): a lazy title before optional
# runs of spaces and `#`s backtracked cubically on a long line of spaces (a document's text).
HEADING = re.compile(r"^(#{1,6})[ \t]+([^\n]*)$", re.MULTILINE)
FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
HEADING_SEPARATOR = " > "

# Coarsest first. A piece ends after its separator, so no character is dropped.
_SEPARATORS = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n\s*"),  # lines
    re.compile(r"(?<=[.!?;:])\s+"),  # sentences (and clauses)
    re.compile(r"\s+"),  # words
)


def count_tokens(text: str) -> int:
    """The token estimate used for sizes: word runs and punctuation marks count one each."""
    return sum(1 for _ in TOKEN.finditer(text))


@dataclass(frozen=True, slots=True)
class PageSpan:
    """Page `number` (1-based) is ``text[start:end]`` of the extracted text."""

    number: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """``source[start:end]``; its first `overlap` characters repeat the previous chunk's end."""

    ordinal: int
    text: str
    start: int
    end: int
    overlap: int
    token_count: int
    heading_path: str
    page: int | None

    @property
    def new_text(self) -> str:
        """The text this chunk adds after the overlap."""
        return self.text[self.overlap :]


@dataclass(frozen=True, slots=True)
class _Segment:
    start: int
    end: int
    heading_path: str
    page: int | None


def chunk_text(
    source: str,
    *,
    size: int = 400,
    overlap: int = 60,
    pages: Sequence[PageSpan] = (),
) -> list[Chunk]:
    """Chunks of `source` of at most `size` tokens, consecutive ones (within a heading
    section and page) sharing up to `overlap` tokens. Costs O(n log n) in the text length."""
    if size < 1:
        raise ValueError("size must be at least 1 token")
    if not 0 <= overlap < size:
        raise ValueError("overlap must be at least 0 and smaller than size")
    if not source:
        return []
    chunks: list[Chunk] = []
    for segment in _segments(source, pages):
        pieces = _split(source, segment.start, segment.end, size, 0)
        previous: tuple[int, int] | None = None  # (start, end) of the last chunk here
        index = 0
        while index < len(pieces):
            budget = size - overlap if previous is not None else size
            new_start = pieces[index][0]
            new_end, new_tokens = pieces[index][1], pieces[index][2]
            index += 1
            while index < len(pieces) and new_tokens + pieces[index][2] <= budget:
                new_end = pieces[index][1]
                new_tokens += pieces[index][2]
                index += 1
            start = new_start
            if previous is not None and overlap:
                start = _overlap_start(
                    source, previous[0], new_start, min(overlap, size - new_tokens)
                )
            text = source[start:new_end]
            chunks.append(
                Chunk(
                    ordinal=len(chunks),
                    text=text,
                    start=start,
                    end=new_end,
                    overlap=new_start - start,
                    token_count=count_tokens(text),
                    heading_path=segment.heading_path,
                    page=segment.page,
                )
            )
            previous = (start, new_end)
    return chunks


def _overlap_start(source: str, lower: int, new_start: int, tokens: int) -> int:
    """Where `tokens` trailing tokens of ``source[lower:new_start]`` begin (new_start if 0)."""
    if tokens <= 0:
        return new_start
    found = [m.start() for m in TOKEN.finditer(source, lower, new_start)]
    if not found:
        return new_start
    return found[-min(tokens, len(found))]


def _split(source: str, start: int, end: int, size: int, level: int) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` pieces covering ``source[start:end]``, each <= size tokens
    (whitespace-only pieces count 0 and are kept, so the cover stays exact)."""
    tokens = count_tokens(source[start:end])
    if tokens <= size:
        return [(start, end, tokens)] if end > start else []
    if level == len(_SEPARATORS):
        return _split_tokens(source, start, end, size)
    cuts = [
        m.end() for m in _SEPARATORS[level].finditer(source, start, end) if start < m.end() < end
    ]
    if not cuts:
        return _split(source, start, end, size, level + 1)
    pieces: list[tuple[int, int, int]] = []
    for piece_start, piece_end in zip([start, *cuts], [*cuts, end], strict=True):
        pieces.extend(_split(source, piece_start, piece_end, size, level + 1))
    return pieces


def _split_tokens(source: str, start: int, end: int, size: int) -> list[tuple[int, int, int]]:
    """Cut between tokens every `size` tokens (one very long word or a run of symbols)."""
    starts = [m.start() for m in TOKEN.finditer(source, start, end)]
    cuts = [starts[i] for i in range(size, len(starts), size)]
    bounds = [start, *cuts, end]
    return [(a, b, count_tokens(source[a:b])) for a, b in itertools.pairwise(bounds) if b > a]


def _segments(source: str, pages: Sequence[PageSpan]) -> list[_Segment]:
    """Heading sections intersected with pages, in order, covering the whole source."""
    boundaries: dict[int, str | None] = {0: None}  # offset -> new heading path (or None)
    path: list[tuple[int, str]] = []  # (level, title)
    in_fence = False
    fences = [m.start() for m in FENCE.finditer(source)]
    fence_index = 0
    for match in HEADING.finditer(source):
        while fence_index < len(fences) and fences[fence_index] < match.start():
            in_fence = not in_fence
            fence_index += 1
        if in_fence:
            continue
        title = match.group(2).rstrip(" \t\r").rstrip("#").strip()
        if not title:
            continue
        level = len(match.group(1))
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        boundaries[match.start()] = HEADING_SEPARATOR.join(title for _, title in path)
    for page in pages:
        boundaries.setdefault(page.start, None)
    offsets = sorted(o for o in boundaries if 0 <= o < len(source))
    ordered_pages = sorted(pages, key=lambda p: p.start)
    segments: list[_Segment] = []
    current_path = ""
    for offset, next_offset in zip(offsets, [*offsets[1:], len(source)], strict=True):
        if boundaries[offset] is not None:
            current_path = boundaries[offset] or ""
        if next_offset > offset:
            segments.append(
                _Segment(offset, next_offset, current_path, _page_at(ordered_pages, offset))
            )
    return segments


def _page_at(pages: Sequence[PageSpan], offset: int) -> int | None:
    number = None
    for page in pages:
        if page.start > offset:
            break
        number = page.number
    return number
