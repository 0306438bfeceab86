"""What an attached file is, from its bytes alone: never from its name or the type a browser
or client declared (an executable named `photo.png` is refused).

Images: PNG, JPEG, GIF and WebP by their signatures, at most the size a model may be sent
(providers.runtime.images). Documents: PDF by its header; text (plain, Markdown, CSV,
JSON, HTML) when it is valid UTF-8 without NULs or other binary control characters. These
are what the knowledge bases' extractors read (rag/runtime/extract.py: text, Markdown,
HTML, PDF; no office formats). Anything else is refused with what is accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from providers.runtime.images import MAX_IMAGE_BYTES, sniffed_type

ACCEPTED = "Attach an image (PNG, JPEG, GIF, WebP), a PDF, or a text file (text, Markdown, HTML)."
MAX_NAME_CHARS = 255
# Control characters other than tab, newline, carriage return and form feed: binary.
_BINARY = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_UNSHOWN = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


class AttachmentRefused(ValueError):
    """Not a file the chat takes; the message says why, for the person."""


@dataclass(frozen=True, slots=True)
class Detected:
    kind: str  # "image" | "document" (agents.models.AttachmentKind)
    media_type: str


def detect(data: bytes) -> Detected:
    """The kind and type of `data`, or AttachmentRefused. One pass over the bytes at most
    (the UTF-8 check)."""
    if not data:
        raise AttachmentRefused("The file is empty.")
    image = sniffed_type(data)
    if image is not None:
        if len(data) > MAX_IMAGE_BYTES:
            raise AttachmentRefused(
                f"An image may be at most {MAX_IMAGE_BYTES // 2**20} MB (what models take)."
            )
        return Detected("image", image)
    if data.startswith(b"%PDF-"):
        return Detected("document", "application/pdf")
    if b"\x00" in data:
        raise AttachmentRefused(f"This file's type is not supported. {ACCEPTED}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AttachmentRefused(f"This file's type is not supported. {ACCEPTED}") from None
    if _BINARY.search(text):
        raise AttachmentRefused(f"This file's type is not supported. {ACCEPTED}")
    if not text.strip():
        raise AttachmentRefused("The file holds no text.")
    head = text[:1024].lstrip().lower()
    if head.startswith(("<!doctype html", "<html")):
        return Detected("document", "text/html")
    return Detected("document", "text/plain")


def shown_name(name: str) -> str:
    """The name as given, for display only (escaped wherever it is shown): control and
    direction-changing characters dropped, at most MAX_NAME_CHARS characters."""
    name = _UNSHOWN.sub("", name or "").strip()
    if len(name) > MAX_NAME_CHARS:
        _, dot, suffix = name.rpartition(".")
        tail = "…." + suffix if dot and len(suffix) <= 10 else "…"  # the type stays readable
        name = name[: MAX_NAME_CHARS - len(tail)] + tail
    return name or "attachment"


def download_name(name: str) -> str:
    """The name a download is offered under: no directory parts."""
    return re.sub(r"[/\\]", "_", name).lstrip(".") or "attachment"
