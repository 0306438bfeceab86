"""Tool names a tenant's definitions may not take: the built-ins' (except to tune that very
built-in), the tools the platform adds to agents (memory, knowledge search, structured
output), the words of the tools' REST paths, and the shapes of manufactured names (crew
delegation, MCP `ask_<agent>`, MCP context providers' `<prefix>__<tool>`). Otherwise a
tenant tool could stand in for one of them and receive what was meant for it."""

from __future__ import annotations

# Kept in step with agents.runtime.memory, agents.runtime.structured, agents.runtime.tool_routing,
# agents.runtime.code_mode and rag.tools.
PLATFORM_TOOL_NAMES = frozenset(
    {
        "knowledge_search",
        "remember_fact",
        "recall_facts",
        "forget_fact",
        "final_answer",
        "search_tools",  # agents.runtime.tool_routing
        "run_code",  # agents.runtime.code_mode
    }
)
RESERVED_PREFIXES = ("delegate_to_", "ask_")
# Words of the tools' REST paths (/api/v1/tools/import, /tools/try): a tool so named could
# not be read or changed at /api/v1/tools/<name>.
PATH_WORDS = frozenset({"import", "try"})


def reserved_reason(name: str) -> str | None:
    """Why a tenant tool may not be named `name`, or None."""
    if name in PLATFORM_TOOL_NAMES:
        return f"{name!r} is the name of a tool the platform provides."
    if name in PATH_WORDS:
        path = f"/api/v1/tools/{name}"
        return f"{name!r} is a word of the tools' REST paths ({path}): choose another."
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"Names starting with {prefix!r} are reserved for the platform."
    if "__" in name:
        return "Names with '__' are reserved for tools of MCP connections."
    return None
