from __future__ import annotations

from celery import shared_task


@shared_task(name="agentplatform.ping")
def ping() -> str:
    """Proves a worker consumes the queue; /healthz and the tests call it."""
    return "pong"
