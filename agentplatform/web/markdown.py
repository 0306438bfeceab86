"""Model output and tool results as safe HTML: Markdown rendered on the server with raw HTML
off (markdown-it-py), then sanitized with an allow-list (nh3, the Ammonia sanitizer), so
neither a model nor a tool can inject script or markup. Links open without the page's
opener or referrer."""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

_parser = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_parser.enable(["table", "strikethrough"])

TAGS = {
    "p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}


def render_markdown(text: str) -> str:
    """Safe HTML for `text` (to be marked safe by the caller's template filter)."""
    return nh3.clean(
        _parser.render(text or ""),
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
