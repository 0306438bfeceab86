"""Bytes of a document -> its text (and page spans), or one ExtractionError saying why not.

Formats: plain text and markdown (kept as they are), HTML (visible text through the
stdlib parser; script, style and similar dropped; h1-h6 become markdown headings so the
chunker keeps them), PDF through pypdf (one page span per page). Anything else that is
not text (images, archives, office files, random bytes) is refused.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePosixPath

from rag.runtime.chunking import PageSpan

PAGE_SEPARATOR = "\n\n"
# A PDF's text is read page by page up to these: a small file can inflate (its pages
# sharing one compressed stream) to tens of millions of characters of CPU-bound reading.
MAX_PDF_PAGES = 5_000
MAX_PDF_CHARS = 5_000_000
_TEXT_TYPES = {"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json"}
_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".csv", ".json", ".text", ""}
_HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


class ExtractionError(Exception):
    """The document cannot be turned into text; `str(exc)` tells the tenant why."""


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    pages: tuple[PageSpan, ...] = ()
    title: str = ""
    kind: str = "text"  # "text" | "markdown" | "html" | "pdf"


def extract(
    data: bytes, *, filename: str = "", content_type: str = "", max_bytes: int = 10 * 2**20
) -> Extracted:
    """The text of `data`. Raises ExtractionError for empty, over-size, binary, unsupported
    or corrupt input. Costs one pass over the bytes (PDF: pypdf's parse)."""
    if len(data) > max_bytes:
        raise ExtractionError(
            f"The document is {_size(len(data))}; the limit is {_size(max_bytes)}."
        )
    if not data.strip():
        raise ExtractionError("The document is empty.")
    media = content_type.split(";", 1)[0].strip().lower()
    suffix = PurePosixPath(filename.lower()).suffix
    if data.startswith(b"%PDF-") or media == "application/pdf" or suffix == ".pdf":
        result = _pdf(data)
    else:
        text = _decode(data, content_type)
        head = text[:1024].lstrip().lower()
        is_html = (
            media in _HTML_TYPES
            or suffix in _HTML_SUFFIXES
            or head.startswith(("<!doctype html", "<html"))
        )
        if is_html:
            result = _html(text)
        elif media and media not in _TEXT_TYPES and not media.startswith("text/"):
            raise ExtractionError(
                f"Unsupported file type {media}: upload text, markdown, HTML or PDF."
            )
        elif suffix not in _TEXT_SUFFIXES and suffix not in _HTML_SUFFIXES and not media:
            raise ExtractionError(
                f"Unsupported file type {suffix}: upload text, markdown, HTML or PDF."
            )
        else:
            kind = "markdown" if suffix in (".md", ".markdown") or "markdown" in media else "text"
            result = Extracted(_normalise(text), kind=kind)
    if not result.text.strip():
        raise ExtractionError(
            "The document contains no text"
            + (" (a scanned PDF needs OCR first)." if result.kind == "pdf" else ".")
        )
    return result


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def _decode(data: bytes, content_type: str) -> str:
    """UTF-8 (BOM allowed), or the charset the content type names; binary is refused."""
    if b"\x00" in data[:8192]:
        raise ExtractionError(
            "This is a binary file, not text: upload text, markdown, HTML or PDF."
        )
    charset = re.search(r"charset=([\w-]+)", content_type or "", re.IGNORECASE)
    encodings = ["utf-8-sig"] + ([charset.group(1)] if charset else []) + ["cp1252"]
    for encoding in encodings:
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
        sample = text[:8192]
        if len(_CONTROL.findall(sample)) > max(2, len(sample) // 100):
            break  # decodes, but is mostly control characters: binary
        return text
    raise ExtractionError("This is a binary file, not text: upload text, markdown, HTML or PDF.")


def _pdf(data: bytes) -> Extracted:
    try:
        import pypdf
        from pypdf.errors import PyPdfError
    except ImportError:  # pragma: no cover - a dependency of the project
        raise ExtractionError("PDF support is not installed (the pypdf package).") from None
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # it warns on every odd object
    try:
        reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception:
                raise ExtractionError("The PDF is password-protected.") from None
        if len(reader.pages) > MAX_PDF_PAGES:
            raise ExtractionError(f"The PDF has more than {MAX_PDF_PAGES:,} pages: split it.")
        texts, total = [], 0
        for page in reader.pages:
            texts.append(_normalise(page.extract_text() or ""))
            total += len(texts[-1])
            if total > MAX_PDF_CHARS:
                raise ExtractionError(
                    f"The PDF holds more than {MAX_PDF_CHARS:,} characters of text: split it."
                )
    except ExtractionError:
        raise
    except (
        PyPdfError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        OSError,
    ):  # (the library's words stay out: they may quote the file)
        raise ExtractionError("The PDF could not be read (corrupt or unsupported).") from None
    if not texts:
        raise ExtractionError("The PDF has no pages.")
    parts: list[str] = []
    pages: list[PageSpan] = []
    offset = 0
    for number, text in enumerate(texts, start=1):
        text = text.strip("\n")
        if parts:
            parts.append(PAGE_SEPARATOR)
            offset += len(PAGE_SEPARATOR)
        pages.append(PageSpan(number, offset, offset + len(text)))
        parts.append(text)
        offset += len(text)
    return Extracted("".join(parts), tuple(pages), kind="pdf")


_SKIPPED = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
_BLOCKS = {
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "br", "hr",
    "table", "tr", "ul", "ol", "dl", "dt", "dd", "blockquote", "pre", "figure", "figcaption",
    "form", "address", "li", "td", "th",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.current: list[str] = []
        self.skip_depth = 0
        self.in_title = False
        self.title: list[str] = []
        self.pre = 0

    def _flush(self, blank: bool = False) -> None:
        line = "".join(self.current)
        line = line if self.pre else re.sub(r"[ \t\f\v\u00a0]+", " ", line).strip()
        if line:
            self.lines.append(line)
        if blank and self.lines and self.lines[-1] != "":
            self.lines.append("")
        self.current = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "title":
            self.in_title = True
        if tag in _SKIPPED:
            self.skip_depth += 1
        elif tag in _HEADINGS:
            self._flush(blank=True)
            self.current.append("#" * _HEADINGS[tag] + " ")
        elif tag in _BLOCKS:
            self._flush(blank=tag in ("p", "table", "ul", "ol", "blockquote", "pre", "section"))
            if tag == "li":
                self.current.append("- ")
            if tag == "pre":
                self.pre += 1

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in _BLOCKS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _SKIPPED:
            self.skip_depth = max(0, self.skip_depth - 1)
        elif tag in _HEADINGS:
            self._flush(blank=True)
        elif tag in _BLOCKS:
            if tag == "pre":
                self.pre = max(0, self.pre - 1)
            self._flush(blank=tag in ("p", "table", "ul", "ol", "blockquote", "pre", "section"))

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.skip_depth:
            return
        self.current.append(data if self.pre else data.replace("\n", " "))


def _html(text: str) -> Extracted:
    parser = _TextParser()
    try:
        parser.feed(text)
        parser.close()
    except (AssertionError, ValueError) as exc:  # pragma: no cover - the parser is lenient
        raise ExtractionError(f"The HTML could not be parsed: {exc}") from None
    parser._flush()
    lines = parser.lines
    while lines and lines[-1] == "":
        lines.pop()
    title = re.sub(r"\s+", " ", "".join(parser.title)).strip()
    return Extracted("\n".join(lines), title=title[:300], kind="html")
