"""Refuse a NUL character in the path, the query string or a form of any web or admin page.

PostgreSQL cannot store NUL in text and refuses it even in a filter, so a stray `%00` in a
search box, an admin filter (`?name__exact=%00`) or a form that a view reads directly
would otherwise end as a 500, possibly after part of a write. One check here, before any
view runs, answers 400 with a plain message instead; nothing is read or written.

The REST and OpenAI-compatible APIs (`/api/`, `/v1/`) and webhooks (`/hooks/`) validate
at their own edge and answer in their JSON error format, per field
(`agentplatform/api/errors.py`); they are left alone here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.datastructures import MultiValueDict

API_PATHS = ("/api/", "/v1/", "/hooks/")  # (/hooks/: the raw body is what is signed)
NUL = "\x00"


class NullCharacterMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PATHS):
            where = _nul_in(request)
            if where is not None:
                return HttpResponseBadRequest(
                    f"This request was refused: {where} contains a NUL character (\\x00), "
                    "which is not allowed. Remove it and try again.",
                    content_type="text/plain; charset=utf-8",
                )
        return self.get_response(request)


def _nul_in(request: HttpRequest) -> str | None:
    """Where the first NUL is ("the address", "the field “title”"), or None. Reading
    request.POST parses a form body once, as the view would (CSRF reads it too); other
    bodies (JSON) are left to the view."""
    if NUL in request.path:
        return "the address"
    for kind, data in (("parameter", request.GET), ("field", request.POST)):
        for name, value in _pairs(data):
            if NUL in name or NUL in value:
                return f"the {kind} “{name}”" if name.isidentifier() else f"a {kind}"
    for name, upload in _pairs(request.FILES):
        if NUL in (upload.name or ""):
            return f"the name of the file in “{name}”" if name.isidentifier() else "a file name"
    return None


def _pairs(data: MultiValueDict) -> Iterator[tuple[str, Any]]:
    for name, values in data.lists():
        for value in values:
            yield name, value
