"""A pasted `curl` command made into one HTTP tool draft (tools/runtime/imports/curl.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.runtime.imports.curl import MAX_COMMAND_CHARS as MAX_CURL_CHARS
from tools.runtime.imports.curl import CurlImport, parse_curl

__all__ = ["MAX_CURL_CHARS", "CurlImport", "curl_import"]


def curl_import(
    *,
    command: str,
    marks: Mapping[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
) -> CurlImport:
    """The draft `command` makes, with `marks` as arguments (`parse_curl`); nothing is
    saved or sent. ImportRefused with our message for a command we will not read. The
    credential found is in `.secret`: the caller keeps it for the save and never shows it."""
    return parse_curl(command, marks=marks, name=name, description=description)
