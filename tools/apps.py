from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"

    def ready(self) -> None:
        from tools.context_providers import register_health_check, register_provider_lister
        from tools.mcp_connections import mcp_connections_check_health, mcp_providers_of

        register_health_check("mcp", mcp_connections_check_health)
        register_provider_lister("mcp", mcp_providers_of)
