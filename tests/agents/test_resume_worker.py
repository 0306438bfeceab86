"""A failed run resumed through a real Celery worker, after its connection was fixed: it
goes on from its last checkpoint and the write it made is not sent again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agents.models import Run, RunEvent
from agents.runs import run_resume, run_start
from tenancy.records import history
from tests.factories import make_http_tool
from tests.fakes.provider_server import (
    ErrorReply,
    ProviderServer,
    TextReply,
    ToolCall,
    ToolCallReply,
)
from tests.tools.local_server import LocalServer, Reply

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait(run: Run, statuses: set[str], timeout: float = 30) -> Run:
    """The run once its status is one of `statuses` (a deadline, not a sleep for a race)."""
    deadline = time.monotonic() + timeout
    while True:
        run = Run.objects.get(pk=run.pk)
        if run.status in statuses:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run.pk} is {run.status}, not one of {statuses}")
        time.sleep(0.05)


@pytest.fixture
def orders(trio) -> Iterator[LocalServer]:
    """acme's `place_order`: a non-idempotent POST that creates an order each time."""
    server = LocalServer()
    server.route("POST", "/orders", Reply(status=201, json={"order": "created"}))
    make_http_tool(
        trio.acme,
        "place_order",
        server.url + "/orders",
        method="POST",
        input_schema={"type": "object", "properties": {"item": {"type": "string"}}},
        effect="write",
        idempotent=False,
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def healthy() -> Iterator[ProviderServer]:
    """Where the admin points the connection once the first provider is down."""
    server = ProviderServer()
    try:
        yield server
    finally:
        server.close()


def test_a_failed_run_resumed_after_its_connection_is_fixed_repeats_no_write(
    trio, agent, connection, provider_server, healthy, orders, celery_worker_process
):
    agent.approval_policy = "never"  # the write runs without parking for a human
    agent.save()
    connection.max_retries = 2  # the provider is down past its retries: three 500s
    connection.save()
    history.record(connection)
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_1", "place_order", '{"item": "widget"}')]),
        *[ErrorReply(500, "upstream is down")] * 3,
    )
    run = run_start(tenant=trio.acme, agent=agent, input="Order a widget.",
                    initiated_by=trio.alice)  # fmt: skip
    run = wait(run, {"failed", "succeeded"})
    assert run.status == "failed" and "HTTP 500" in run.error
    assert len(provider_server.requests_to("/v1/chat/completions")) == 4
    assert len(orders.requests) == 1  # the order was placed before the outage
    used = run.config_versions["providers.providerconnection"]

    # The admin fixes the connection: another endpoint, a new version of it.
    connection.base_url = healthy.openai_base_url
    connection.save()
    history.record(connection)
    healthy.script("openai", TextReply("Your widget is ordered."))
    resumed = run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert resumed.status == "queued"
    run = wait(run, {"succeeded", "failed"})

    assert run.status == "succeeded", run.error
    assert run.output == "Your widget is ordered."
    assert len(orders.requests) == 1  # the recorded result was reused: no second order
    assert orders.requests[0].headers["idempotency-key"] == f"{run.pk}:call_1"
    (asked,) = healthy.requests_to("/v1/chat/completions")  # the fixed connection answered
    assert asked.body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"order": "created"}',
    }
    fixed = run.config_versions["providers.providerconnection"]
    assert fixed[0][0] == used[0][0] and fixed[0][1] > used[0][1]  # recorded as it ran now
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types.count("tool.started") == types.count("tool.completed") == 1
    assert types.index("run.failed") < types.index("run.resumed") < types.index("run.completed")
    assert types[-1] == "run.completed"
    resumed_event = RunEvent.objects.get(run=run, type="run.resumed").payload
    assert resumed_event["by"] == "alice"
    assert resumed_event["config_versions"]["providers.providerconnection"] == fixed
