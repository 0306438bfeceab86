"""The chat's attached documents read as knowledge-base documents are: extracted
(rag/runtime/extract.py), chunked (rag/runtime/chunking.py), and embedded by the knowledge
bases' default model (the static one). Registered with agents when rag starts
(rag/apps.py: agents never import rag)."""

from __future__ import annotations

from agents.conversations import DocumentUnreadable, Passage, ReadDocument
from rag.runtime.chunking import Chunk, chunk_text
from rag.runtime.extract import ExtractionError, extract


def read_attachment(data: bytes, media_type: str) -> ReadDocument:
    """Its text and passages (a page's or a heading's), or DocumentUnreadable saying why.
    Costs the extraction (a PDF's parse) and one pass of chunking."""
    try:
        extracted = extract(data, content_type=media_type, max_bytes=len(data))
    except ExtractionError as exc:
        raise DocumentUnreadable(str(exc)) from None
    chunks = chunk_text(extracted.text, pages=extracted.pages)
    return ReadDocument(extracted.text, tuple(Passage(c.text, _where(c)) for c in chunks))


def _where(chunk: Chunk) -> str:
    parts = [f"page {chunk.page}"] if chunk.page else []
    if chunk.heading_path:
        parts.append(chunk.heading_path)
    return ", ".join(parts)[:300]
