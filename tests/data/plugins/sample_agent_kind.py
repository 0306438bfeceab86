"""A package outside the platform that adds an agent kind, as any installed package can:
its metadata (sample_agent_kind-0.1.dist-info/entry_points.txt) declares the entry point
`echo` in the group `agentplatform.agent_kinds`. Used by tests/agents/test_plugins.py."""

from __future__ import annotations

from typing import Any

from agents.runtime.loop import NullSink, finish_run
from agents.runtime.spec import RunStatus
from agents.runtime.state import NoCheckpoint, RunState
from providers.runtime.types import UserMessage


async def echo(*, spec: Any, input: str | None = None, sink=None, checkpoint=None, **_: Any):
    """Answers with the input, reversed: no model, no tools."""
    sink = sink or NullSink()

    async def emit(type: str, **payload: Any) -> None:
        await sink.emit(type, payload)

    await emit("run.started", model="echo", agent=spec.name)
    state = RunState(messages=[UserMessage(input or "")], output=(input or "")[::-1])
    return await finish_run(checkpoint or NoCheckpoint(), emit, state, RunStatus.SUCCEEDED)
