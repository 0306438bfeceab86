from __future__ import annotations

from typing import Any

from rest_framework import exceptions, parsers


class SafeJSONParser(parsers.JSONParser):
    """JSONParser that answers 400, not 500, for nesting deep enough to hit the recursion
    limit (the stdlib raises RecursionError there, which DRF does not catch)."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
