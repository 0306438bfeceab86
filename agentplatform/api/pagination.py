from __future__ import annotations

from rest_framework import exceptions
from rest_framework.pagination import Cursor, CursorPagination

MAX_BIGINT = 2**63 - 1


class NewestFirst(CursorPagination):
    """Opaque cursors over `-id`: stable under inserts, no counting queries."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200


class CheckedCursorMixin:
    """A tampered cursor whose position is not an id answers 404 ("Invalid cursor") like
    any other bad cursor, instead of a 500 from the id lookup."""

    def decode_cursor(self, request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            position = cursor.position
            if not position.isascii() or not position.isdigit() or int(position) > MAX_BIGINT:
                raise exceptions.NotFound(self.invalid_cursor_message)
        return cursor


class NewestFirstChecked(CheckedCursorMixin, NewestFirst):
    pass


class OldestFirst(CheckedCursorMixin, NewestFirst):
    """For histories read top-down (a conversation's messages)."""

    ordering = "id"
