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

        from django.db.models.signals import post_delete

        from tenancy.models import Membership

        # However a member leaves (removed, left, single sign-on's groups), their own MCP
        # accounts in that tenant go with them (revoked, deleted: tools.mcp_oauth).
        post_delete.connect(_member_left, sender=Membership, dispatch_uid="tools-member-left")

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


def _member_left(sender, instance, origin=None, **kwargs) -> None:
    from tenancy.models import Tenant
    from tools.mcp_oauth import oauth_forget_member

    model = getattr(origin, "model", type(origin))  # (an object, or a queryset's model)
    if model is Tenant:
        return  # the tenant itself goes: its connections and tokens with it, no entry left
    oauth_forget_member(tenant_id=instance.tenant_id, user_id=instance.user_id)


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
