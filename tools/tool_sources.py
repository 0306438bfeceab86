"""Tenant tool sources: plug-ins (`agentplatform.tenant_tool_sources`, agentplatform/plugins.py)
that add tools to every tenant's registry from that tenant's own configuration — the
platform's MCP server connections are one (tools/mcp_source.py). The loader
(tools/loader.py) asks each when it builds a tenant's registry.

A source has a `label` (where its tools come from, as pages and REST show it), and:
- `tools_of(tenant_id, policy) -> TenantToolsPart`: its tools for the tenant, the secrets
  they read (by reference), and prompt context blocks; no network (read what is cached);
- `names_of(tenant_id) -> set[str]`: the same tools' names without building them.
A tool whose name the tenant's built-ins or definitions already have is left out (with a
warning): a source never shadows the tenant's own tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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


SOURCES: list[TenantToolSource] = []


def add_tenant_tool_source(source: TenantToolSource) -> None:
    """Have every tenant's registry ask `source` (the loader calls it per plug-in)."""
    for name in ("label", "tools_of", "names_of"):
        if not hasattr(source, name):
            raise TypeError(f"a tenant tool source needs `{name}`: {source!r} has none")
    if all(known is not source for known in SOURCES):
        SOURCES.append(source)
