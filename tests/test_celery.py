from __future__ import annotations

from django.conf import settings

from agentplatform.celery import app
from agentplatform.tasks import ping


def test_a_real_worker_runs_the_ping_task_through_redis(celery_worker_process):
    result = ping.apply_async()
    assert result.get(timeout=10) == "pong"
    assert result.successful()
    assert settings.CELERY_BROKER_URL.startswith(("redis", "rediss"))


def test_crash_safety_settings_are_on():
    """What durable runs rely on (a killed worker's task is re-queued); the crash itself is
    exercised with durable runs."""
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
