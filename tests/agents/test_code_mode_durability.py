"""Code mode under kill -9: a real prefork Celery worker runs a program, is killed with its
pool children (and the Monty sandbox they started) in the middle of it, and another worker
resumes the run by replaying the program: the write the program made before the kill is
answered from its record, never sent again (the fleet and fixtures of
tests/agents/test_durability.py)."""

# ruff: noqa: F811  (the fixtures imported from the module that defines them)
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agents.models import Run, RunEvent
from agents.runs import run_start
from tests.agents.test_durability import (  # noqa: F401  (fixtures)
    chat_requests,
    fleet,
    orders,
    recorded_result,
    resume_after_lease,
    run_queue,
    wait_until,
)
from tests.agents.workers import TurnTakingProviderServer
from tests.factories import make_agent, make_http_tool
from tests.tools.local_server import Reply

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROGRAM = (
    "order = place_order(item='widget')\n"
    "check(q=order['order'])\n"  # blocks until the worker has been killed
    "print('order', order['order'], 'checked')"
)


@pytest.fixture
def provider_server() -> Iterator[TurnTakingProviderServer]:
    """The model answers the user with one run_code call (id call_1), a tool result with a
    text."""
    server = TurnTakingProviderServer(tool_name="run_code", arguments={"code": PROGRAM})
    try:
        yield server
    finally:
        server.close()


def test_a_worker_killed_mid_program_is_resumed_and_the_recorded_write_is_not_sent_again(
    trio, connection, provider_server, orders, fleet
):
    gate = threading.Event()

    def slow(request) -> dict:  # the program's second call: in flight at the kill
        gate.wait(10)
        return {"checked": True}

    orders.route("GET", "/check", Reply(echo=slow))
    make_http_tool(trio.acme, "check", orders.url + "/check")
    agent = make_agent(
        trio.acme, "coder", instructions="Use run_code.", code_mode=True, use_all_tools=False,
        tool_names=["place_order", "check"], approval_policy="never",
    )  # fmt: skip
    checks = lambda: [r for r in orders.requests if r.method == "GET"]  # noqa: E731
    posts = lambda: [r for r in orders.requests if r.method == "POST"]  # noqa: E731

    first = fleet.start()
    run = run_start(tenant=trio.acme, agent=agent, input="Order a widget.")
    in_flight = RunEvent.objects.filter(run=run, type="tool.started", payload__call_id="call_1/2")
    wait_until(  # (a read's start is stored while it runs: waited for too)
        lambda: (
            checks()
            and in_flight.exists()
            and recorded_result(Run.objects.get(pk=run.pk), "call_1/1")
        ),
        15,
        "the recorded write and the program's next call in flight",
    )
    fleet.kill(first)  # the worker, its pool and the sandbox die mid-program
    gate.set()
    run.refresh_from_db()
    assert run.status == "running" and run.lease_owner  # the dead worker still holds it
    assert recorded_result(run, "call_1/1") == '{"order": "created"}'
    assert len(posts()) == 1

    fleet.start()
    run = resume_after_lease(run)
    assert run.status == "succeeded", run.error
    assert run.output == "Done." and run.attempts == 2
    assert len(posts()) == 1  # replayed from its record: sent once
    assert posts()[0].headers["idempotency-key"] == f"{run.pk}:call_1/1"
    assert len(checks()) == 2  # the read in flight at the kill ran again (idempotent)
    told = chat_requests(provider_server)[-1].body["messages"][-1]
    assert told == {"role": "tool", "tool_call_id": "call_1", "content": "order created checked"}
    started = RunEvent.objects.filter(run=run, type="tool.started").order_by("seq")
    assert [e.payload["call_id"] for e in started] == ["call_1", "call_1/1", "call_1/2", "call_1/2"]
    [replayed] = RunEvent.objects.filter(run=run, type="code.replayed")
    assert replayed.payload == {"call_id": "call_1", "reused": ["call_1/1"]}
    completed = RunEvent.objects.filter(run=run, type="tool.completed")
    assert sorted(e.payload["call_id"] for e in completed) == ["call_1", "call_1/1", "call_1/2"]
    assert provider_server.errors == []
