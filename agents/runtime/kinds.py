"""Agent kinds: how an agent thinks. Each kind is an async callable with run_agent's
keyword arguments (plus `egress`, a GuardedHttpClient, for kinds that reach out), returning
a RunOutcome. Built-ins register the same way custom kinds do, with @agent_kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from agents.runtime.loop import run_agent
from agents.runtime.spec import RunOutcome

AgentKind = Callable[..., Awaitable[RunOutcome]]
KINDS: dict[str, AgentKind] = {}


def agent_kind(name: str) -> Callable[[AgentKind], AgentKind]:
    def register(function: AgentKind) -> AgentKind:
        if name in KINDS:
            raise ValueError(f"agent kind {name!r} is already registered")
        KINDS[name] = function
        return function

    return register


def get_kind(name: str) -> AgentKind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown agent kind {name!r}; known: {', '.join(sorted(KINDS))}"
        ) from None


@agent_kind("orchestrator")
async def orchestrator(*, egress: Any = None, **kwargs: Any) -> RunOutcome:
    """The tool loop (the default kind)."""
    return await run_agent(**kwargs)


@agent_kind("simple")
async def simple(*, spec, egress: Any = None, **kwargs: Any) -> RunOutcome:
    """One model call, no tools: a prompt template with a model behind it."""
    plain = replace(
        spec, tool_names=(), tool_tags=(), memory=False, output_schema=None, max_rounds=1
    )
    return await run_agent(spec=plain, **kwargs)
