"""Steering and queueing survive a worker killed with kill -9 (the fleet and fixtures of
tests/agents/test_durability.py): a steering message and a queued turn sent while the run
works are stored before they are acknowledged; the worker that resumes the run takes the
steer before its next model call, and the queued turn starts when the run ends."""

# ruff: noqa: F811  (the fixtures imported from the module that defines them)
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from agents.models import Message, QueuedMessage, Run, RunEvent
from agents.runs import message_queue, run_start, run_steer
from agents.services import conversation_save
from agents.tasks import sweep_stale_runs
from tests.agents.test_durability import (  # noqa: F401  (fixtures)
    chat_requests,
    fleet,
    orders,
    posts_by_run,
    resume_after_lease,
    run_queue,
    trusted_agent,
    wait_until,
)
from tests.agents.workers import TurnTakingProviderServer
from tests.fakes.provider_server import Reply, TextReply

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

STEER = "Steer: mention the order."


class SteeredProviderServer(TurnTakingProviderServer):
    """As TurnTakingProviderServer, but the steering message gets a text, not a call."""

    def reply_for(self, body: Any) -> Reply:
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") == "user" and last.get("content") == STEER:
            return TextReply("Ordered, as you asked.", delay_s=self.text_delay_s)
        return super().reply_for(body)


@pytest.fixture
def provider_server() -> Iterator[SteeredProviderServer]:
    server = SteeredProviderServer(tool_name="place_order", arguments={"item": "widget"})
    try:
        yield server
    finally:
        server.close()


def test_a_steer_and_a_queued_turn_sent_before_a_crash_are_kept(
    trio, trusted_agent, provider_server, orders, fleet
):
    provider_server.text_delay_s = 3.0  # the second model call is in progress at the kill
    first = fleet.start()
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": trusted_agent, "title": ""}, owner_user=trio.alice
    )
    run = run_start(
        tenant=trio.acme, agent=trusted_agent, input="Order a widget.", conversation=chat,
        initiated_by=trio.alice,
    )  # fmt: skip
    wait_until(
        lambda: (
            RunEvent.objects.filter(run=run, type="tool.completed").exists()
            and len(chat_requests(provider_server)) == 2
        ),
        15,
        "the tool result and the second model call",
    )
    run.refresh_from_db()
    steer = run_steer(tenant=trio.acme, run=run, text=STEER, by=trio.alice)
    queued = message_queue(tenant=trio.acme, conversation=chat, text="And a gadget?", by=trio.alice)
    assert queued.status == "waiting"
    fleet.kill(first)  # before the dead worker's loop could see either

    fleet.start()
    run = resume_after_lease(run)
    assert run.status == "succeeded", run.error
    assert run.attempts == 2 and run.output == "Ordered, as you asked."
    resumed = chat_requests(provider_server)[2].body["messages"]
    assert resumed[-2]["role"] == "tool" and resumed[-1] == {"role": "user", "content": STEER}
    assert RunEvent.objects.filter(run=run, type="run.steered").count() == 1
    assert run.state["steers"] == [steer.pk]
    assert posts_by_run(orders) == {run.pk: 1}  # the recorded call was not sent again

    # The queued turn started when the resumed run ended, and ran.
    queued.refresh_from_db()
    assert queued.status == "started"
    following = queued.started_run

    def answered() -> bool:
        if Run.objects.get(pk=following.pk).is_terminal:
            return True
        # The worker sent it to its own settings' queue, not this test's: the sweeper asks
        # again for a run queued longer than two leases, as it does for a lost message.
        sweep_stale_runs()
        time.sleep(0.5)
        return False

    wait_until(answered, 30, "the queued turn")
    assert Run.objects.get(pk=following.pk).status == "succeeded"
    assert QueuedMessage.objects.filter(status="waiting").count() == 0
    rows = list(Message.objects.filter(conversation=chat).values_list("role", "content"))
    assert rows[:3] == [
        ("user", "Order a widget."),
        ("assistant", "Ordered, as you asked."),
        ("user", "And a gadget?"),
    ]
