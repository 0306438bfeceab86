"""The tools of a tenant's MCP server connections, as a tenant tool source: an
`agentplatform.tenant_tool_sources` plug-in (pyproject.toml, base/plugins.py), the
way any package may add tools to every tenant's registry from its own configuration.

Each connection's cached listing (written by `tools.mcp_connections.mcp_connection_refresh`;
building never touches the network) becomes `<prefix>__<tool>` tools tagged `context` and
`context:<name>`, with the connection's declared self-tests; its context resource's text
becomes a prompt block. An `unavailable` connection contributes nothing until a refresh
succeeds again.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from base.versions import config_changed
from tools.definitions import mcp_examples
from tools.mcp_oauth import OAuthCredentials
from tools.models import McpServerConnection, McpStatus
from tools.runtime.egress import EgressPolicy
from tools.runtime.mcp_client import McpEndpoint, build_mcp_tool
from tools.runtime.tool import Tool
from tools.tool_sources import TenantToolsPart

logger = logging.getLogger(__name__)
MCP_SERVER = "MCP server"  # where its tools come from (TenantTools.sources)


def mcp_secret_ref(connection: McpServerConnection) -> str:
    return f"mcp:{connection.pk}"


class McpServers:
    label = MCP_SERVER
    kind = "mcp"  # its tools' kind, as REST shows it

    def tools_of(self, tenant_id: int, policy: EgressPolicy) -> TenantToolsPart:
        part = TenantToolsPart()
        for connection in _available(tenant_id):
            part.tools.extend(_connection_tools(connection, part.secrets, policy))
            if connection.context_text.strip():
                part.context_blocks[connection.name] = (
                    f"Context from {connection.name}",
                    connection.context_text,
                )
        return part

    def names_of(self, tenant_id: int) -> set[str]:
        """Its tools' names as cached and allowed, without building them: one query."""
        names = set()
        for connection in _available(tenant_id):
            allowed = set(connection.allowed_tool_names or ())
            for remote in connection.tools_cache or ():
                name = remote.get("name") if isinstance(remote, dict) else None
                if name and (not allowed or name in allowed):
                    names.add(f"{connection.tool_prefix}__{name}")
        return names


MCP_SERVERS = McpServers()


@receiver([post_save, post_delete], sender=McpServerConnection)
def _connection_changed(sender, instance: McpServerConnection, **kwargs) -> None:
    config_changed(instance.tenant_id)  # every process builds anew


def _available(tenant_id: int):
    connections = McpServerConnection.objects.filter(tenant_id=tenant_id, enabled=True)
    return connections.exclude(status=McpStatus.UNAVAILABLE)


def _connection_tools(
    connection: McpServerConnection, secrets: dict[str, str], policy: EgressPolicy
) -> list[Tool]:
    """The connection's cached tools (those allowed) as `<prefix>__<tool>`. A remote tool
    that cannot be one here (a schema that does not compile, a name our providers refuse)
    is skipped with a warning."""
    ref = mcp_secret_ref(connection) if connection.auth_header else None
    if ref is not None:
        secrets[ref] = connection.auth_header
    # An OAuth connection's token is looked up per call: the tenant's, or the run's person's.
    credentials = OAuthCredentials(connection) if connection.uses_oauth else None
    endpoint = McpEndpoint(url=connection.url, policy=policy, timeout_s=connection.timeout_s)
    allowed = set(connection.allowed_tool_names or ())
    tags = frozenset({"context", f"context:{connection.name}"})
    examples = mcp_examples(connection.tool_examples)
    tools = []
    for remote in connection.tools_cache or ():
        if not isinstance(remote, dict) or (allowed and remote.get("name") not in allowed):
            continue
        try:
            item = build_mcp_tool(
                connection_name=connection.name,
                prefix=connection.tool_prefix,
                remote=remote,
                endpoint=endpoint,
                secret_ref=ref,
                tags=tags,
                credentials=credentials,
            )
        except (ValueError, TypeError) as exc:  # one odd remote tool must not stop the rest
            logger.warning(
                "MCP tool %r of connection %s (tenant %s) skipped: %s",
                remote.get("name"), connection.name, connection.tenant_id, exc,
            )  # fmt: skip
            continue
        if own := examples.get(str(remote.get("name"))):
            item = replace(item, examples=tuple(e.arguments for e in own), selftests=own)
        tools.append(item)
    return tools
