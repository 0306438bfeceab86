"""Steering in the agent loop (agents/runtime/loop.py, agents/runtime/steering.py): no
database, a Steering of the test's own, FakeModel."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunStatus
from agents.runtime.state import RunState
from agents.runtime.steering import Steer
from providers.runtime.fake import FakeModel
from providers.runtime.types import ToolResultMessage, UserMessage
from tests.agents.test_loop import CTX, RecordingSink, SavingCheckpointer, make_spec
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Tool, ToolCall


class Inbox:
    """Steering messages, a flag, and a count of the round trips the loop made."""

    def __init__(self, cancel_after: int | None = None) -> None:
        self.stored: list[Steer] = []
        self.flag = False
        self.polls = 0
        self.takes = 0
        self.cancel_after = cancel_after

    def send(self, text: str) -> None:
        self.stored.append(Steer(len(self.stored) + 1, text))
        self.flag = True

    async def poll(self) -> tuple[bool, bool]:
        self.polls += 1
        cancelled = self.cancel_after is not None and self.polls > self.cancel_after
        return cancelled, self.flag

    async def take(self, known: Sequence[int]) -> list[Steer]:
        self.takes += 1
        self.flag = False
        return [s for s in self.stored if s.id not in known]


def go(model, *, spec: AgentSpec | None = None, registry=BUILTINS, **kwargs: Any):
    return asyncio.run(
        run_agent(
            spec=spec or make_spec(), adapter=model, registry=registry, ctx=CTX, input="hi",
            **kwargs,
        )
    )  # fmt: skip


def test_a_message_sent_while_a_tool_runs_joins_before_the_next_model_call():
    inbox = Inbox()

    async def tick(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        inbox.send("Use metric units.")  # the person types while the tool runs
        return {"ok": True}

    tool = Tool(name="tick", description="Tick.", input_schema={"type": "object"}, handler=tick)
    registry = ToolRegistry([tool])
    model = FakeModel([ToolCall("c1", "tick", {}), "Done, in metres."])
    sink, checkpoint = RecordingSink(), SavingCheckpointer()

    outcome = go(model, registry=registry, steering=inbox, sink=sink, checkpoint=checkpoint)

    assert outcome.status is RunStatus.SUCCEEDED
    second = model.requests[1].messages
    assert isinstance(second[-2], ToolResultMessage)  # after the results, never between
    assert second[-1] == UserMessage("Use metric units.")
    assert sink.of("run.steered") == [{"id": 1, "text": "Use metric units.", "round": 1}]
    assert "steered" in checkpoint.reasons()
    assert checkpoint.last_state().steers == [1]
    # One poll before each model call; a read only when the flag was up.
    assert (inbox.polls, inbox.takes) == (2, 1)


def test_a_round_with_nothing_waiting_reads_nothing():
    inbox = Inbox()
    model = FakeModel([ToolCall("c1", "calculator", {"expression": "1+1"}), "2"])
    go(model, steering=inbox)
    assert (inbox.polls, inbox.takes) == (2, 0)


def test_a_stop_is_seen_in_the_same_poll():
    inbox = Inbox(cancel_after=1)
    model = FakeModel([ToolCall("c1", "calculator", {"expression": "1+1"}), "never asked"])
    outcome = go(model, steering=inbox)
    assert outcome.status is RunStatus.CANCELLED and model.remaining == 1


def test_a_resumed_run_reads_once_and_takes_only_what_it_does_not_hold():
    """The flag may have been cleared by a worker that died before its checkpoint: the
    resumed run reads anyway, and does not apply twice what its state holds."""
    inbox = Inbox()
    inbox.stored = [Steer(1, "first"), Steer(2, "second")]  # flag down
    state = RunState(messages=[UserMessage("hi"), UserMessage("first")], steers=[1])
    model = FakeModel(["ok"])
    sink = RecordingSink()

    outcome = asyncio.run(
        run_agent(
            spec=make_spec(), adapter=model, registry=BUILTINS, ctx=CTX, state=state,
            steering=inbox, sink=sink,
        )
    )  # fmt: skip

    assert outcome.status is RunStatus.SUCCEEDED
    assert list(model.requests[0].messages[-2:]) == [UserMessage("first"), UserMessage("second")]
    assert [p["id"] for p in sink.of("run.steered")] == [2]


def test_no_message_joins_once_no_round_is_left():
    """At the round limit the loop ends without asking the model: a message waiting stays
    for the caller (the platform makes it the next turn)."""
    inbox = Inbox()
    inbox.send("too late")
    calc = ToolCall("c1", "calculator", {"expression": "1+1"})
    outcome = go(FakeModel([calc]), spec=make_spec(max_rounds=1), steering=inbox)
    assert outcome.status is RunStatus.MAX_ROUNDS
    # Taken before round 1 only: it was there already.
    assert inbox.takes == 1
