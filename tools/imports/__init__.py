"""Tool drafts from other descriptions of an HTTP API, and trying a draft before it is saved
(issue #40): the services the faces call. Parsing is Django-free (tools/runtime/imports/);
saving goes through `tools.services.tool_definition_save`, so every draft passes the checks
a hand-made tool passes."""

from tools.imports.curl_import import curl_import
from tools.imports.drafts import DraftTool, draft_tool

__all__ = ["DraftTool", "curl_import", "draft_tool"]
