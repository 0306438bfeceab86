"""Agent kinds: how an agent thinks. Each kind is an async callable with run_agent's
keyword arguments (plus `egress`, a GuardedHttpClient, for kinds that reach out), returning
a RunOutcome. Kinds are plug-ins (the `agentplatform.agent_kinds` entry points, loaded when
the agents app starts: base/plugins.py); the built-in ones below are declared in
the platform's pyproject.toml the same way a package declares its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunOutcome

AgentKind = Callable[..., Awaitable[RunOutcome]]
KINDS: dict[str, AgentKind] = {}


def register_kind(name: str, function: AgentKind) -> None:
    """Add a kind under `name` (the loader does, for each plug-in). A kind's optional
    `runs_with(spec) -> spec` attribute is the spec it gives the loop, for a kind that
    changes it (fewer tools, one round): what its runs are offered follows from it."""
    if name in KINDS and KINDS[name] is not function:
        raise ValueError(f"agent kind {name!r} is already registered")
    if not callable(function):
        raise ValueError(f"agent kind {name!r} is not callable")
    KINDS[name] = function


def spec_for_kind(spec: AgentSpec) -> AgentSpec:
    """The spec the loop of `spec.kind` runs with (the same spec for most kinds)."""
    adjust = getattr(KINDS.get(spec.kind), "runs_with", None)
    return spec if adjust is None else adjust(spec)


def get_kind(name: str) -> AgentKind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown agent kind {name!r}; known: {', '.join(sorted(KINDS))}"
        ) from None


async def orchestrator(*, egress: Any = None, **kwargs: Any) -> RunOutcome:
    """The tool loop (the default kind)."""
    return await run_agent(**kwargs)


def _one_call(spec: AgentSpec) -> AgentSpec:
    return replace(
        spec, tool_names=(), tool_tags=(), memory=False, output_schema=None, max_rounds=1
    )


async def simple(*, spec, egress: Any = None, **kwargs: Any) -> RunOutcome:
    """One model call, no tools: a prompt template with a model behind it."""
    return await run_agent(spec=_one_call(spec), **kwargs)


simple.runs_with = _one_call  # type: ignore[attr-defined]
