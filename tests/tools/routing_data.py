"""The labelled routing set of tests/data/tool_routing (written by its generate.py) as
Tools and requests, for the routing tests and bench/routing.py."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from tools.runtime.context import RunContext
from tools.runtime.tool import Tool

DATA = Path(__file__).resolve().parent.parent / "data" / "tool_routing"


@cache
def labelled_tools() -> tuple[Tool, ...]:
    """Every tool of the set; each answers {"tool": its name, **arguments}."""
    return tuple(as_tool(item) for item in json.loads((DATA / "tools.json").read_text()))


@cache
def special_tool_names() -> frozenset[str]:
    """The hand-written tools (generate.py's SPECIALS), not the vendors' CRUD ones."""
    items = json.loads((DATA / "tools.json").read_text())
    return frozenset(item["name"] for item in items if item["set"] == "special")


@cache
def labelled_requests() -> tuple[dict[str, Any], ...]:
    """{"request": text, "tools": [names, all needed]}"""
    return tuple(json.loads((DATA / "requests.json").read_text()))


def as_tool(item: dict[str, Any]) -> Tool:
    name = item["name"]

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        return {"tool": name, **arguments}

    return Tool(
        name=name,
        description=item["description"],
        input_schema=item["input_schema"],
        handler=handler,
        tags=frozenset(item["tags"]),
        examples=tuple(item["examples"]),
    )


def recall_at(ranked: list[str], wanted: list[str]) -> float:
    """The share of the wanted tools that `ranked` holds."""
    return sum(1 for name in wanted if name in ranked) / len(wanted)
