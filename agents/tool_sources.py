"""Tools bound to one agent, contributed by other apps (rag: `knowledge_search` over the
agent's knowledge bases). An app registers a source at startup (AppConfig.ready); agents
never import those apps. A source's tool is offered whatever the agent's tool picks are
(linking a knowledge base is the pick), unless the agent excludes it by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from agents.runtime.spec import AgentSpec
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Tool

ToolSource = Callable[[object], Tool | None]  # the agent -> its tool, or None
_sources: list[ToolSource] = []


def register_tool_source(source: ToolSource) -> None:
    if source not in _sources:
        _sources.append(source)


def with_agent_tools(agent, spec: AgentSpec, registry: ToolRegistry):
    """(spec, registry) with the agent's own tools added and picked."""
    own = [tool for source in _sources if (tool := source(agent)) is not None]
    if not own:
        return spec, registry
    registry = ToolRegistry(list(registry))
    for tool in own:
        registry.register(tool, replace=True)
    if spec.tool_names is not None:  # picked by name or tag: pick these too
        spec = replace(spec, tool_names=(*spec.tool_names, *(t.name for t in own)))
    return spec, registry
