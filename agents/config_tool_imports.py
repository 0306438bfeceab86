"""The configuration document's `tool_imports` section (docs/tool-import.md): each entry's
OpenAPI operations become `tools` entries before the document is compiled, so they are
planned, diffed, checked and applied exactly as tools listed by hand are. Problems about
them are reported where the admin wrote them: `tool_imports[0].getPetById.secret`, not at
the index the made entry took under `tools`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pydantic

from agents.runtime.config.compiler import ConfigProblem
from agents.runtime.config.document import ConfigDocument, ToolImportEntry
from tools.imports import FetchedDocuments, ImportRefused, openapi_tool_entries

# The document's limit on `tool_imports` entries (its field's max_length).
MAX_TOOL_IMPORTS = next(
    rule.max_length
    for rule in ConfigDocument.model_fields["tool_imports"].metadata
    if hasattr(rule, "max_length")
)
_TOOL_PATH = re.compile(r"^tools\[(\d+)\](.*)$", re.DOTALL)


@dataclass
class ImportedTools:
    """Where the `tools` entries from `first` on came from: `origins[i]` is the
    `tool_imports[j].<name>` path of entry `first + i`."""

    first: int = 0
    origins: list[str] = field(default_factory=list)

    def relocated(self, problem: ConfigProblem) -> ConfigProblem:
        match = _TOOL_PATH.match(problem.path)
        made = int(match[1]) - self.first if match is not None else -1
        if not 0 <= made < len(self.origins):
            return problem
        return replace(problem, path=self.origins[made] + match[2])


def tool_imports_expanded(
    data: Any, *, secret_of: Callable[[str], str]
) -> tuple[Any, ImportedTools, list[ConfigProblem]]:
    """`data` with each `tool_imports` entry's tools appended to `tools` (a tool that sends
    a credential refers to its own stored secret, `secret_of(name)`), where they came from,
    and the problems of the entries that could not be made (a fetch, a document, a choice
    refused). A malformed entry is left to the compiler, which reports it."""
    imported = ImportedTools()
    if not isinstance(data, dict) or not isinstance(data.get("tool_imports"), list):
        return data, imported, []
    tools = data.get("tools", [])
    if not isinstance(tools, list) or len(data["tool_imports"]) > MAX_TOOL_IMPORTS:
        return data, imported, []  # the compiler refuses too many before any is fetched
    documents = FetchedDocuments()  # a URL several entries name is fetched once
    listed = {tool.get("name") for tool in tools if isinstance(tool, dict)}
    imported.first = len(tools)
    made: list[dict[str, Any]] = []
    problems: list[ConfigProblem] = []
    for index, raw in enumerate(data["tool_imports"]):
        path = f"tool_imports[{index}]"
        try:
            entry = ToolImportEntry.model_validate(raw)
        except pydantic.ValidationError:
            continue
        try:
            entries = openapi_tool_entries(
                url=entry.openapi_url,
                base_url=entry.base_url,
                operations=entry.operations,
                documents=documents,
            )
        except ImportRefused as exc:
            problems.append(_problem(path, exc))
            continue
        for tool in entries:
            name = tool["name"]
            if name in listed:
                problems.append(
                    ConfigProblem(f"{path}.operations", f"{name!r} is also listed under tools")
                )
                continue
            if "auth" in tool["config"]:
                tool["secret"] = secret_of(name)
            listed.add(name)
            made.append(tool)
            imported.origins.append(f"{path}.{name}")
    return {**data, "tools": [*tools, *made]}, imported, problems


def _problem(path: str, exc: ImportRefused) -> ConfigProblem:
    """A refusal at the entry's field it concerns; within the fetched document, its path
    goes in the reason."""
    where = exc.path or ""
    if where.startswith("operations"):
        return ConfigProblem(f"{path}.{where}", exc.message)
    reason = exc.message if where in ("", "url") else f"the document at {where}: {exc.message}"
    return ConfigProblem(f"{path}.openapi_url", reason)
