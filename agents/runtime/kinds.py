"""Agent kinds: how an agent thinks. Each kind is an async callable with run_agent's
keyword arguments (plus `egress`, a GuardedHttpClient, for kinds that reach out), returning
a RunOutcome. Built-ins register the same way custom kinds do, with @agent_kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunOutcome

AgentKind = Callable[..., Awaitable[RunOutcome]]
KINDS: dict[str, AgentKind] = {}
_RUNS_WITH: dict[str, Callable[[AgentSpec], AgentSpec]] = {}


def agent_kind(
    name: str, *, runs_with: Callable[[AgentSpec], AgentSpec] | None = None
) -> Callable[[AgentKind], AgentKind]:
    """Register a kind. `runs_with(spec)` is the spec it gives the loop, for a kind that
    changes it (fewer tools, one round): what its runs are offered follows from it."""

    def register(function: AgentKind) -> AgentKind:
        if name in KINDS:
            raise ValueError(f"agent kind {name!r} is already registered")
        KINDS[name] = function
        if runs_with is not None:
            _RUNS_WITH[name] = runs_with
        return function

    return register


def spec_for_kind(spec: AgentSpec) -> AgentSpec:
    """The spec the loop of `spec.kind` runs with (the same spec for most kinds)."""
    adjust = _RUNS_WITH.get(spec.kind)
    return spec if adjust is None else adjust(spec)


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


def _one_call(spec: AgentSpec) -> AgentSpec:
    return replace(
        spec, tool_names=(), tool_tags=(), memory=False, output_schema=None, max_rounds=1
    )


@agent_kind("simple", runs_with=_one_call)
async def simple(*, spec, egress: Any = None, **kwargs: Any) -> RunOutcome:
    """One model call, no tools: a prompt template with a model behind it."""
    return await run_agent(spec=_one_call(spec), **kwargs)
