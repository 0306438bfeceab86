from __future__ import annotations

from celery import shared_task

from tools.mcp_connections import mcp_connections_refresh_due


@shared_task(name="tools.refresh_mcp_connections")
def refresh_mcp_connections() -> dict[str, int]:
    """Refresh the MCP connections whose last refresh is MCP_REFRESH_S old (beat runs this
    every minute). Idempotent: a second delivery finds nothing due."""
    return mcp_connections_refresh_due()
