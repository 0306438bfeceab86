from __future__ import annotations

from django.test import override_settings


def test_healthz_reports_database_redis_and_worker(client, db, celery_worker_process):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    for name in ("database", "redis", "worker"):
        assert body["checks"][name]["ok"] is True
        assert body["checks"][name]["latency_ms"] >= 0


def test_healthz_is_503_when_a_dependency_is_down_and_names_only_the_error_class(
    client, db, celery_worker_process
):
    with override_settings(REDIS_URL="unix:///nonexistent/secret-path.sock"):
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["redis"] == {"ok": False, "error": "ConnectionError"}
    assert "secret-path" not in response.content.decode()


def test_healthz_reports_a_missing_worker(client, db, celery_worker_process):
    from agentplatform.celery import app

    queue = app.conf.task_default_queue
    app.conf.task_default_queue = "nobody-consumes-this"  # as if no worker were running
    try:
        response = client.get("/healthz")
    finally:
        app.conf.task_default_queue = queue
    assert response.status_code == 503
    assert response.json()["checks"]["worker"] == {"ok": False, "error": "TimeoutError"}
    assert response.json()["checks"]["database"]["ok"] is True
