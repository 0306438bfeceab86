"""rag/runtime/extract.py: text, markdown, HTML and PDF in; one clear error otherwise."""

from __future__ import annotations

import os

import pytest

from rag.runtime.chunking import chunk_text
from rag.runtime.extract import ExtractionError, extract
from tests.rag.pdfs import make_pdf


def test_text_and_markdown_come_back_as_they_are():
    assert extract(b"Hello\r\nworld", filename="a.txt").text == "Hello\nworld"
    result = extract("# Title\n\nCaf\u00e9".encode(), filename="a.md")
    assert result.text == "# Title\n\nCaf\u00e9"
    assert result.kind == "markdown"


def test_html_keeps_visible_text_and_headings_and_drops_scripts():
    html = b"""<!doctype html><html><head><title>The Page</title><style>p{color:red}</style>
    <script>alert('x')</script></head><body><h1>Main</h1><p>First   paragraph
    here.</p><h2>Sub</h2><ul><li>one</li><li>two</li></ul><script>var hidden=1</script>
    </body></html>"""
    result = extract(html, content_type="text/html; charset=utf-8")
    assert result.title == "The Page"
    assert "alert" not in result.text and "hidden" not in result.text and "color" not in result.text
    assert "# Main" in result.text and "## Sub" in result.text
    assert "First paragraph here." in result.text
    assert "- one" in result.text
    headings = {c.heading_path for c in chunk_text(result.text, size=100, overlap=10)}
    assert "Main > Sub" in headings


def test_pdf_pages_are_carried():
    data = make_pdf(["Page one text.\nSecond line.", "Page two text.", "Page three text."])
    result = extract(data, filename="doc.pdf")
    assert result.kind == "pdf"
    assert [p.number for p in result.pages] == [1, 2, 3]
    for span, expected in zip(result.pages, ["Page one", "Page two", "Page three"], strict=True):
        assert result.text[span.start : span.end].startswith(expected)
    chunks = chunk_text(result.text, size=60, overlap=5, pages=result.pages)
    assert [c.page for c in chunks] == [1, 2, 3]


@pytest.mark.parametrize(
    ("data", "filename", "content_type", "message"),
    [
        (b"", "empty.txt", "", "The document is empty."),
        (b"  \n\n ", "blank.txt", "", "The document is empty."),
        (b"%PDF-1.4\n garbage that is no PDF", "bad.pdf", "", "The PDF could not be read"),
        (
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(200),
            "a.png",
            "image/png",
            "binary file",
        ),
        (bytes(range(1, 256)) * 3, "data.bin", "", "binary file"),
        (b"x" * 2000, "big.txt", "", "the limit is 1000 bytes"),
        (b"PK\x03\x04" + b"a" * 100, "book.docx", "", "Unsupported file type .docx"),
    ],
)
def test_bad_input_gives_one_clear_error(data, filename, content_type, message):
    with pytest.raises(ExtractionError, match=message.replace("(", r"\(").replace(".", r"\.")):
        extract(data, filename=filename, content_type=content_type, max_bytes=1000)


def test_a_pdf_without_text_says_so():
    with pytest.raises(ExtractionError, match="OCR"):
        extract(make_pdf([""]), filename="scan.pdf")


def test_a_pdf_is_read_only_up_to_its_bounds(monkeypatch):
    from rag.runtime import extract as module

    data = make_pdf(["Page one text.", "Page two text.", "Page three text."])
    monkeypatch.setattr(module, "MAX_PDF_PAGES", 2)
    with pytest.raises(ExtractionError, match="more than 2 pages: split it"):
        extract(data, filename="doc.pdf")
    monkeypatch.setattr(module, "MAX_PDF_PAGES", 10)
    monkeypatch.setattr(module, "MAX_PDF_CHARS", 20)  # stops at the second page
    with pytest.raises(ExtractionError, match="more than 20 characters of text"):
        extract(data, filename="doc.pdf")
