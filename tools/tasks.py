from __future__ import annotations

from celery import shared_task

from tools.context_providers import context_providers_check_due
from tools.mcp_connections import mcp_connections_refresh_due


@shared_task(name="tools.refresh_mcp_connections")
def refresh_mcp_connections() -> dict[str, int]:
    """Refresh the MCP connections whose last refresh is MCP_REFRESH_S old (beat runs this
    every minute). Idempotent: a second delivery finds nothing due."""
    return mcp_connections_refresh_due()


@shared_task(name="tools.check_context_providers")
def check_context_providers() -> dict[str, dict[str, int]]:
    """Check the health of every context provider (MCP connections, knowledge bases) last
    checked CONTEXT_PROVIDER_HEALTH_S ago or more (beat runs this every minute). Idempotent:
    a second delivery finds nothing due."""
    return context_providers_check_due()
