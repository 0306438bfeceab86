from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"

    def ready(self) -> None:
        load_builtin_tools()
        load_tenant_tool_sources()

        from tools.context_providers import register_health_check, register_provider_lister
        from tools.mcp_connections import mcp_connections_check_health, mcp_providers_of

        register_health_check("mcp", mcp_connections_check_health)
        register_provider_lister("mcp", mcp_providers_of)

        from tenancy.records import history
        from tools.mcp_connections import mcp_connection_save
        from tools.models import McpServerConnection, ToolDefinition
        from tools.services import tool_definition_save

        # Their saves are versioned (docs/config-history.md); a restore saves as any save.
        history.register(
            ToolDefinition,
            name="tools",
            noun="tool",
            restore=lambda tenant, obj, changes: tool_definition_save(
                tenant=tenant, definition=obj, changes=changes
            ),
        )
        history.register(
            McpServerConnection,
            name="mcp-connections",
            noun="MCP server connection",
            restore=lambda tenant, obj, changes: mcp_connection_save(
                tenant=tenant, connection=obj, changes=changes
            ),
        )


def load_builtin_tools() -> None:
    """Every `agentplatform.tools` plug-in's tools (base/plugins.py): built-ins of
    every tenant, each recorded as its plug-in's. Loading again adds what was installed
    since."""
    from base import plugins
    from tools.runtime.tool import Tool
    from tools.tool_sources import add_builtin_tool

    for plugin in plugins.load(plugins.TOOLS):
        items = [plugin.value] if isinstance(plugin.value, Tool) else list(plugin.value)
        for item in items:
            if not isinstance(item, Tool):
                raise plugins.PluginError(
                    f"plug-in {plugin.name!r} of {plugin.package} gives "
                    f"{type(item).__name__}, not a Tool"
                )
            add_builtin_tool(item, plugin)


def load_tenant_tool_sources() -> None:
    """Every `agentplatform.tenant_tool_sources` plug-in (the tenant's MCP servers' tools...),
    asked by each tenant's registry. Loading again adds what was installed since."""
    from base import plugins
    from tools.tool_sources import add_tenant_tool_source

    for plugin in plugins.load(plugins.TENANT_TOOL_SOURCES):
        try:
            add_tenant_tool_source(plugin.value, plugin)
        except TypeError as exc:
            raise plugins.PluginError(
                f"plug-in {plugin.name!r} of {plugin.package}: {exc}"
            ) from None
