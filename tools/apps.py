from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"

    def ready(self) -> None:
        from tools.context_providers import register_health_check
        from tools.mcp_connections import mcp_connections_check_health

        register_health_check("mcp", mcp_connections_check_health)
