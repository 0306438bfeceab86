"""Tenant tool sources: plug-ins (`agentplatform.tenant_tool_sources`, base/plugins.py)
that add tools to every tenant's registry from that tenant's own configuration — the
platform's MCP server connections are one (tools/mcp_source.py). The loader
(tools/loader.py) asks each when it builds a tenant's registry.

A source has a `label` (where its tools come from, as pages and REST show it), and:
- `tools_of(tenant_id, policy) -> TenantToolsPart`: its tools for the tenant, the secrets
  they read (by reference), and prompt context blocks; no network (read what is cached);
- `names_of(tenant_id) -> set[str]`: the same tools' names without building them;
- optionally `kind`: what its tools are (`mcp`), heeded for the platform's own sources
  only (another package's tools are its plug-in's).
A tool whose name the tenant's built-ins or definitions already have is left out (with a
warning): a source never shadows the tenant's own tools.

Where each tool comes from is recorded where it is registered (`ToolOrigin`): the
built-ins' by `add_builtin_tool`, a source's by `add_tenant_tool_source`, both told the
plug-in that gives them; the loader gives a tenant definition its own kind. REST shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from base.plugins import Plugin
from tools.runtime.builtins import BUILTINS
from tools.runtime.egress import EgressPolicy
from tools.runtime.tool import Tool


@dataclass
class TenantToolsPart:
    tools: list[Tool] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)  # secret ref -> value
    context_blocks: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> block


class TenantToolSource(Protocol):
    label: str

    def tools_of(self, tenant_id: int, policy: EgressPolicy) -> TenantToolsPart: ...

    def names_of(self, tenant_id: int) -> set[str]: ...


@dataclass(frozen=True)
class ToolOrigin:
    """Where a tool of a tenant's registry comes from. `kind`: builtin (a plug-in of the
    platform's own), plugin (another package's: `plugin` names its entry point, `package`
    the distribution declaring it), mcp (an MCP server connection's), or the kind of the
    tenant's definition (http, builtin)."""

    kind: str
    plugin: str = ""
    package: str = ""

    @classmethod
    def of(cls, plugin: Plugin, own_kind: str = "builtin") -> ToolOrigin:
        """A tool `plugin` gives: `own_kind` when the platform declares it."""
        return cls(own_kind) if plugin.own else cls("plugin", plugin.name, plugin.package)


SOURCES: list[TenantToolSource] = []
BUILTIN_ORIGINS: dict[str, ToolOrigin] = {}  # built-in tool name -> the plug-in's
SOURCE_ORIGINS: dict[str, ToolOrigin] = {}  # source label -> the plug-in's


def add_builtin_tool(tool: Tool, plugin: Plugin) -> None:
    """Give every tenant `tool` (BUILTINS) as `plugin`'s. A name already given stays with
    its first tool (the platform's own plug-ins load first)."""
    if BUILTINS.has(tool.name):
        return
    BUILTINS.register(tool)
    BUILTIN_ORIGINS[tool.name] = ToolOrigin.of(plugin)


def add_tenant_tool_source(source: TenantToolSource, plugin: Plugin) -> None:
    """Have every tenant's registry ask `source`, `plugin`'s (the loader calls it per
    plug-in); the platform's own may say what kind its tools are (`kind`: mcp)."""
    for name in ("label", "tools_of", "names_of"):
        if not hasattr(source, name):
            raise TypeError(f"a tenant tool source needs `{name}`: {source!r} has none")
    if all(known is not source for known in SOURCES):
        SOURCES.append(source)
        SOURCE_ORIGINS[source.label] = ToolOrigin.of(plugin, getattr(source, "kind", "builtin"))
