"""GET /metrics: hidden without a token setting, refused without the token, and the figures
of the runs recorded (read from the database and Redis at scrape time)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.runs import run_inline
from base.versions import shared_redis
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

TOKEN = "metrics-token-for-tests"


def scrape(client) -> dict[str, dict[tuple, float]]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    figures: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            figures.setdefault(sample.name, {})[key] = sample.value
    return figures


def test_without_a_token_setting_there_is_no_such_page(client, db, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer ", "Bearer t\u00e9st"]
)
def test_without_the_token_it_is_refused(client, db, settings, header):
    settings.METRICS_TOKEN = TOKEN
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"agentplatform_" not in response.content


def test_a_member_session_is_no_token(client, trio, settings):
    settings.METRICS_TOKEN = TOKEN
    client.force_login(trio.alice)
    assert client.get("/metrics").status_code == 401


def test_the_figures_follow_the_runs(client, trio, agent, provider_server, settings):
    settings.METRICS_TOKEN = TOKEN
    settings.RUNS_QUEUE = "metrics-test-runs"  # a queue no worker of the session consumes
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("c1", "calculator", '{"expression": "1/0"}')],
            input_tokens=20,
            output_tokens=5,
        ),
        TextReply("Cannot divide by zero.", input_tokens=30, output_tokens=4),
        ErrorReply(500, "down"),
    )
    ok = run_inline(tenant=trio.acme, agent=agent, input="1/0?")
    failed = run_inline(tenant=trio.acme, agent=agent, input="again")
    assert (ok.status, failed.status) == ("succeeded", "failed")
    redis = shared_redis()
    redis.delete(settings.RUNS_QUEUE)
    redis.lpush(settings.RUNS_QUEUE, b"{}", b"{}")
    try:
        figures = scrape(client)
    finally:
        redis.delete(settings.RUNS_QUEUE)

    runs = figures["agentplatform_runs"]
    assert runs[(("status", "succeeded"), ("tenant", "acme"))] == 1
    assert runs[(("status", "failed"), ("tenant", "acme"))] == 1
    tokens = figures["agentplatform_tokens_total"]
    assert tokens[(("tenant", "acme"), ("type", "input"))] == 50
    assert tokens[(("tenant", "acme"), ("type", "output"))] == 9
    assert figures["agentplatform_run_duration_seconds_count"][(("tenant", "acme"),)] == 2
    assert (
        figures["agentplatform_run_duration_seconds_bucket"][(("le", "+Inf"), ("tenant", "acme"))]
        == 2
    )
    assert figures["agentplatform_run_duration_seconds_sum"][(("tenant", "acme"),)] > 0
    errors = figures["agentplatform_tool_errors_total"]
    assert errors == {(("tenant", "acme"), ("tool", "calculator")): 1}
    depth = figures["agentplatform_queue_depth"]
    assert depth[(("queue", "metrics-test-runs"),)] == 2
    assert "agentplatform_runs_in_flight" in {
        f.name
        for f in text_string_to_metric_families(
            client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
        )
    }


def test_runs_executing_now_are_in_flight(client, trio, agent, settings):
    from agents.models import Run
    from agents.runs import run_start

    settings.METRICS_TOKEN = TOKEN
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="running")
    figures = scrape(client)
    assert figures["agentplatform_runs_in_flight"] == {(("tenant", "acme"),): 1}


def test_tool_errors_are_counted_on_their_partial_index(db):
    """The scrape's query matches the partial index's predicate (so it never reads the
    whole events table); with sequential scans off, the plan names the index."""
    from django.db import connection, transaction

    from agents.selectors import tool_errors_by_tenant

    sql, params = tool_errors_by_tenant().query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "run_event_tool_error" in plan, plan


def test_a_scraper_asking_for_openmetrics_gets_it(client, db, settings):
    settings.METRICS_TOKEN = TOKEN
    response = client.get(
        "/metrics",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
        HTTP_ACCEPT="application/openmetrics-text; version=1.0.0",
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")
