"""Celery tasks of provider connections."""

from __future__ import annotations

from celery import shared_task

from providers.routing import check_connections


@shared_task(name="providers.check_connections", ignore_result=True)
def check_connections_task() -> int:
    """Every provider connection's health (beat: PROVIDER_HEALTH_S)."""
    return check_connections()
