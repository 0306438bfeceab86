"""One way to extend the platform: Python entry points, as pluggy-style registries do. A
package — the platform itself, or one you install beside it — declares in its metadata
(pyproject.toml, `[project.entry-points."<group>"]`) what it adds:

- `agentplatform.tools`: a Tool, or an iterable of Tools (workflows made tools included),
  that every tenant has as a built-in (a tenant definition may rename, change or hide it).
- `agentplatform.tool_sources`: `source(agent) -> Tool | None`, a tool an agent's runs get
  from a context of theirs (its knowledge bases...); shown as coming from the source's
  `label` attribute, else the entry point's name.
- `agentplatform.tenant_tool_sources`: an object with `label`, `tools_of(tenant_id, policy)`
  and `names_of(tenant_id)` (tools/tool_sources.py): tools every agent of a tenant may pick,
  from that tenant's own configuration (its MCP server connections: tools/mcp_source.py).
- `agentplatform.agent_kinds`: an async callable taking run_agent's keyword arguments (and
  `egress`) and returning a RunOutcome; the entry point's name is the kind's name. An
  optional `runs_with(spec) -> spec` attribute says what the loop runs it with.

Each registry's owner loads its group when Django starts (tools/apps.py, agents/apps.py);
nothing else registers anything. A plug-in that cannot be loaded stops the start with its
name and why, rather than running without it. docs/plugins.md has a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

TOOLS = "agentplatform.tools"
TOOL_SOURCES = "agentplatform.tool_sources"
TENANT_TOOL_SOURCES = "agentplatform.tenant_tool_sources"
AGENT_KINDS = "agentplatform.agent_kinds"
OWN_PACKAGE = "agentplatform"  # the distribution of the platform's own plug-ins


class PluginError(RuntimeError):
    """A declared plug-in cannot be loaded; the message names it."""


@dataclass(frozen=True)
class Plugin:
    name: str  # the entry point's
    value: Any  # what it points at, loaded
    package: str  # the distribution that declares it

    @property
    def own(self) -> bool:
        """One of the platform's own (declared in its pyproject.toml)."""
        return self.package == OWN_PACKAGE


def load(group: str) -> list[Plugin]:
    """Every entry point of `group` in the installed distributions, loaded, by package then
    name (the platform's own first, so a plug-in cannot take a built-in's place by order)."""
    found = []
    for point in entry_points(group=group):
        package = point.dist.name if point.dist is not None else "?"
        try:
            value = point.load()
        except Exception as exc:
            raise PluginError(
                f"plug-in {point.name!r} ({group}) of {package} cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        found.append(Plugin(point.name, value, package))
    return sorted(found, key=lambda p: (not p.own, p.package, p.name))
