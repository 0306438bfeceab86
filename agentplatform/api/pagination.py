from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NewestFirst(CursorPagination):
    """Opaque cursors over `-id`: stable under inserts, no counting queries."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200
