"""GET /healthz: database, Redis and a Celery worker round trip, as JSON.

200 when all three answer, 503 otherwise. Errors name the exception class only, so the
page never echoes connection strings.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from agentplatform.tasks import ping

WORKER_TIMEOUT_S = 3.0


def _timed(check: Callable[[], None]) -> dict:
    started = time.perf_counter()
    try:
        check()
    except Exception as exc:  # a health check reports every failure, it never raises
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": True, "latency_ms": round((time.perf_counter() - started) * 1000, 1)}


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _redis() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def _worker() -> None:
    result = ping.apply_async(expires=WORKER_TIMEOUT_S)
    try:
        if result.get(timeout=WORKER_TIMEOUT_S) != "pong":
            raise RuntimeError("unexpected reply")
    finally:
        result.forget()


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _timed(_database), "redis": _timed(_redis), "worker": _timed(_worker)}
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "degraded", "checks": checks},
        status=200 if healthy else 503,
    )
