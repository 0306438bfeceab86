"""A document's extracted text, put back together from its stored chunks.

Ingestion stores chunks, not the extracted text (rag/ingestion.py; the Document keeps the
original bytes, which would need extracting again). Chunks are exact slices of that text
(rag/runtime/chunking.py): consecutive chunks of one segment (same heading path and page)
share an overlap — the first chunk's last tokens begin the next — and chunks of different
segments share nothing. So the text is each chunk without the overlap it repeats.

The overlap is not stored, so it is found again: the chunker takes
``min(overlap_tokens, size - new_tokens)`` trailing tokens of the previous chunk, which is
``min(overlap_tokens, tokens of the previous chunk)`` unless one piece of text filled the
chunk; so that suffix is tried first, and failing it (a chunk filled by one long piece, or
chunk settings changed since ingestion) the longest suffix of the previous chunk, starting
at a token but not its first, that the chunk begins with. Text that repeats itself across
a chunk boundary in such a chunk (a run of the same words) may lose a repetition; an
overlap as long as the whole previous chunk is taken for none. Costs O(total characters)
for ordinary text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rag.runtime.chunking import TOKEN


@dataclass(frozen=True, slots=True)
class StoredChunk:
    text: str
    heading_path: str = ""
    page: int | None = None


def document_text(chunks: Sequence[StoredChunk], *, overlap_tokens: int) -> str:
    """The text the chunks (in ordinal order) were cut from."""
    parts: list[str] = []
    previous: StoredChunk | None = None
    for chunk in chunks:
        same_segment = (
            previous is not None
            and previous.heading_path == chunk.heading_path
            and previous.page == chunk.page
        )
        repeated = _overlap(previous.text, chunk.text, overlap_tokens) if same_segment else 0
        parts.append(chunk.text[repeated:])
        previous = chunk
    return "".join(parts)


def _overlap(previous: str, text: str, overlap_tokens: int) -> int:
    """How many leading characters of `text` repeat the end of `previous` (see the module)."""
    # Never all of its tokens: a chunk starting with the whole previous one is a new
    # segment repeating it (the same heading twice), which the chunker makes, while an
    # overlap that large needs a chunk smaller than the overlap before a full one.
    starts = [m.start() for m in TOKEN.finditer(previous)][1:]
    if not starts or not text or overlap_tokens <= 0:
        return 0
    expected = starts[-min(overlap_tokens, len(starts))]
    if text.startswith(previous[expected:]):
        return len(previous) - expected
    first = text[0]
    for start in starts:  # longest first
        if previous[start] == first and text.startswith(previous[start:]):
            return len(previous) - start
    return 0
