"""Searching the words of one owner's conversations (PostgreSQL full text over
`Message.search`, a generated tsvector with a GIN index), best hits first, each with a
highlighted snippet.

Message text is anyone's: the snippet is HTML-escaped whole and only the highlight marks are
markup. PostgreSQL marks the hits with two control characters that the text itself cannot
hold (they are taken out of it first), which become <mark> after escaping.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from html import escape

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db.models import F, Value
from django.db.models.functions import Replace
from django.utils.safestring import SafeString, mark_safe

from agents.models import Message
from tenancy.models import ApiKey, Tenant

MAX_QUERY = 200
_START, _STOP = "\x02", "\x03"


@dataclass(frozen=True)
class Hit:
    message_id: int
    conversation_id: int
    conversation_title: str
    role: str
    created_at: datetime
    rank: float
    snippet: SafeString  # escaped text with <mark> around the words found

    @property
    def snippet_text(self) -> str:
        """The snippet without its marks (for plain-text faces, still escaped)."""
        return str(self.snippet).replace("<mark>", "").replace("</mark>", "")


def message_search(
    *, tenant: Tenant, owner: AbstractBaseUser | ApiKey, query: str, limit: int = 20
) -> list[Hit]:
    """The messages of `owner`'s conversations in the tenant that match `query` (web-search
    syntax: words, "a phrase", -not, or), best first (cover density, then newest), at most
    `limit`. One query; the snippets are made for those rows only."""
    query = " ".join(query.split())[:MAX_QUERY]
    if not query:
        return []
    owned = (
        {"conversation__owner_api_key": owner}
        if isinstance(owner, ApiKey)
        else {"conversation__owner_user": owner}
    )
    words = SearchQuery(query, search_type="websearch", config="english")
    plain = Replace(Replace(F("content"), Value(_START), Value("")), Value(_STOP), Value(""))
    rows = (
        Message.objects.filter(tenant=tenant, search=words, **owned)
        .annotate(
            rank=SearchRank(F("search"), words, cover_density=True),
            headline=SearchHeadline(
                plain,
                words,
                config="english",
                start_sel=_START,
                stop_sel=_STOP,
                max_words=24,
                min_words=8,
                max_fragments=2,
                fragment_delimiter=" … ",
            ),
        )
        .order_by("-rank", "-id")
        .values_list(
            "pk", "conversation_id", "conversation__title", "role", "created_at", "rank", "headline"
        )[: max(1, min(limit, 100))]
    )
    return [
        Hit(pk, conversation_id, title or f"Conversation {conversation_id}", role, at, rank,
            _highlighted(headline))
        for pk, conversation_id, title, role, at, rank, headline in rows
    ]  # fmt: skip


def _highlighted(headline: str) -> SafeString:
    text = " ".join(headline.split())
    return mark_safe(  # noqa: S308 (escaped whole; the marks are ours)
        escape(text).replace(_START, "<mark>").replace(_STOP, "</mark>")
    )
