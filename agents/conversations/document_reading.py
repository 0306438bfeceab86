"""How an attached document becomes text and passages: a plug-in's. Knowledge bases read
documents in rag (rag/runtime/extract.py, chunking.py, the static embedder), which sits
above agents; rag registers its reader and embedder here when it starts (rag/apps.py), as
it registers the memory's embedder. Without one, documents are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools.runtime.routing import TextEmbedder


class DocumentUnreadable(ValueError):
    """The document cannot be read; the message says why, for the person (never a
    library's own words)."""


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    where: str = ""  # a citation's locator: "page 3", "Setup > Install"


@dataclass(frozen=True, slots=True)
class ReadDocument:
    text: str  # the whole text
    passages: tuple[Passage, ...]  # what a search finds, in order


@dataclass(frozen=True, slots=True)
class DocumentReading:
    read: Callable[[bytes, str], ReadDocument]  # (bytes, detected media type)
    embedder: TextEmbedder | None = None  # passages and queries; None: searched by words


_registered: list[DocumentReading] = []


def register_document_reading(reading: DocumentReading | None) -> None:
    """Read attached documents with `reading` (None: documents are refused)."""
    _registered[:] = [reading] if reading is not None else []


def document_reading() -> DocumentReading | None:
    return _registered[0] if _registered else None
