"""Tool drafts from other descriptions of an HTTP API, and trying a draft before it is saved
(issue #40): the services the faces call. Parsing is Django-free (tools/runtime/imports/);
saving goes through `tools.services.tool_definition_save`, so every draft passes the checks
a hand-made tool passes. Faces import this facade, never its modules.

- OpenAPI (`from_openapi.py`): preview a document's operations as tools (what the model
  will see, and a diff against the tenant's tools of the same names), then save the chosen
  ones at once; or give the configuration document's `tool_imports` the chosen
  operations' tool entries.
- cURL: `curl_import` is the Django-free parser's `parse_curl` (nothing saved or sent;
  the credential found is in `.secret`, for the save only); drafts tried before saving
  (`drafts.py`).
"""

from __future__ import annotations

from tools.imports.drafts import DraftTool, DryCallLimiter, draft_tool
from tools.imports.from_openapi import (
    FetchedDocuments,
    OpenApiPreview,
    PreviewedTool,
    openapi_import,
    openapi_preview,
    openapi_tool_entries,
)
from tools.runtime.imports import ImportRefused, ToolDraft
from tools.runtime.imports.curl import MAX_COMMAND_CHARS as MAX_CURL_CHARS
from tools.runtime.imports.curl import CurlImport
from tools.runtime.imports.curl import parse_curl as curl_import

__all__ = [
    "MAX_CURL_CHARS",
    "CurlImport",
    "DraftTool",
    "DryCallLimiter",
    "FetchedDocuments",
    "ImportRefused",
    "OpenApiPreview",
    "PreviewedTool",
    "ToolDraft",
    "curl_import",
    "draft_tool",
    "openapi_import",
    "openapi_preview",
    "openapi_tool_entries",
]
