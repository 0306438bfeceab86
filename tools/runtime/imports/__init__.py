"""Tool drafts made from other descriptions of an HTTP API (an OpenAPI document, a cURL
command): Django-free parsers whose drafts `tools.imports` previews and saves through the
tool definition service, so every draft passes the same checks as a hand-made tool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ImportRefused(Exception):
    """A document or command we will not turn into tools. The message is ours (safe to
    show a caller); `path` says where in the input, when known ("paths./pets.get")."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True)
class ToolDraft:
    """One HTTP tool as an import proposes it, before anything is saved. `config` is an
    HTTP tool config (tools/runtime/http_tool.py) in dict form; its `auth` says how the
    credential is sent, never the credential itself."""

    name: str
    description: str
    input_schema: dict[str, Any]
    config: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    effect: str = ""  # "" : derived from the method, as a hand-made tool's
    source: str = ""  # where it came from: "GET /pets/{petId}", "curl"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def definition_fields(self) -> dict[str, Any]:
        """The changes `tools.services.tool_definition_save` takes for this draft."""
        return {
            "name": self.name,
            "kind": "http",
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "config": self.config,
            "effect": self.effect,
        }
