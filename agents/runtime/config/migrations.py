"""Older document versions brought up to the current one on load, one step per version.

A step takes the data of version N (already checked to be a mapping) and returns version
N + 1's; it changes only what the format changed, so whatever else is wrong is reported by
the current version's checks, at its path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.runtime.config.document import VERSION

Step = Callable[[dict[str, Any]], dict[str, Any]]


def _v0_to_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 wrote a tool's confirmation as `requires_approval: true`."""
    tools = data.get("tools")
    if isinstance(tools, list):
        data["tools"] = [_v0_tool(tool) for tool in tools]
    return {**data, "version": 1}


def _v0_tool(tool: Any) -> Any:
    if not isinstance(tool, dict) or "requires_approval" not in tool:
        return tool
    tool = dict(tool)
    required = tool.pop("requires_approval")
    if "confirmation" not in tool:
        tool["confirmation"] = {"required": required}
    return tool


STEPS: dict[int, Step] = {0: _v0_to_v1}


class UnsupportedVersion(ValueError):
    pass


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """`data` at the current version. UnsupportedVersion when `version` is missing, not a
    whole number, or unknown."""
    version = data.get("version")
    if "version" not in data:
        raise UnsupportedVersion(f"give the document's version: version: {VERSION}")
    if isinstance(version, bool) or not isinstance(version, int):
        raise UnsupportedVersion(f"must be a whole number; the current version is {VERSION}")
    if version > VERSION or (version < VERSION and version not in STEPS):
        known = ", ".join(str(v) for v in sorted({*STEPS, VERSION}))
        raise UnsupportedVersion(f"version {version} is not supported; use one of {known}")
    while version < VERSION:
        data = STEPS[version](dict(data))
        version = data["version"]
    return data
