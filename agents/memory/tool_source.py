"""Memory as a tool source: an `agentplatform.tool_sources` plug-in (pyproject.toml) that
gives an agent whose `memory` is on the tools to remember, recall and forget facts, bound to
its memory settings (scope, retention, key runs). A run is offered them when it has a
person, or is a key's acting for no member and the agent keeps memory for keys
(agents/tool_sources.py: `needs_user`, `key_runs`)."""

from __future__ import annotations

from functools import lru_cache

from agents.memory.scopes import MemorySettings
from agents.memory.store import DjangoFactStore
from agents.models import Agent, MemoryScope
from agents.runtime.memory import MEMORY_TOOL_NAMES, memory_tools
from tools.runtime.tool import Tool

SHARED_WITH = {
    MemoryScope.AGENT: "everyone who uses this agent",
    MemoryScope.TENANT: "everyone in this workspace",
}


@lru_cache(maxsize=1024)
def _tools_for(settings: MemorySettings) -> tuple[Tool, ...]:
    """The tools of one set of settings (they keep nothing per run: shared by its runs);
    a shared scope's remember_fact says who shares it."""
    shared_with = SHARED_WITH.get(settings.scope, "")
    return tuple(memory_tools(DjangoFactStore(settings), shared_with=shared_with))


def memory_tools_for_agent(agent: Agent) -> list[Tool]:
    return list(_tools_for(MemorySettings.of(agent))) if agent.memory else []


def _serves_key_runs(agent: Agent) -> bool:
    return agent.memory and agent.memory_key_runs


memory_tools_for_agent.label = "memory"  # type: ignore[attr-defined]
memory_tools_for_agent.tool_names = MEMORY_TOOL_NAMES  # type: ignore[attr-defined]
memory_tools_for_agent.needs_user = True  # type: ignore[attr-defined]
memory_tools_for_agent.key_runs = _serves_key_runs  # type: ignore[attr-defined]
