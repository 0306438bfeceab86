"""A package outside the platform that adds an agent kind and a tenant tool source, as any
installed package can: its metadata (sample_agent_kind-0.1.dist-info/entry_points.txt)
declares `echo` in the group `agentplatform.agent_kinds` and `greetings` in
`agentplatform.tenant_tool_sources`. Used by tests/agents/test_plugins.py."""

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


class Greetings:
    """Gives every tenant a `greet` tool (a real source would read the tenant's own
    configuration, as the platform's MCP servers do)."""

    label = "greetings"

    def tools_of(self, tenant_id: int, policy: Any):
        from tools.runtime.tool import tool
        from tools.tool_sources import TenantToolsPart

        @tool(tags={"greetings"})
        def greet(name: str) -> str:
            """Greet someone by name."""
            return f"Hello, {name}!"

        return TenantToolsPart(tools=[greet])

    def names_of(self, tenant_id: int) -> set[str]:
        return {"greet"}


GREETINGS = Greetings()
