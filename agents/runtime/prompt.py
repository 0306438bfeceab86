"""System prompt composition and the digests that identify a run's configuration."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from agents.runtime.client_request import platform_name
from agents.runtime.memory import MEMORY_TOOL_NAMES
from agents.runtime.spec import AgentSpec
from agents.runtime.structured import FINAL_ANSWER
from tools.runtime.registry import ToolRegistry


def compose_system_prompt(
    spec: AgentSpec,
    registry: ToolRegistry,
    context_blocks: Sequence[tuple[str, str]] = (),
    *,
    routed: bool = False,
) -> str:
    """Instructions, then caller-supplied context blocks (title, text), memory awareness,
    and a tool guide generated from the registry. `routed`: the registry holds only the
    tools every round offers (agents/runtime/tool_routing.py); the guide says so."""
    parts = [spec.instructions.strip()] if spec.instructions.strip() else []
    for title, text in context_blocks:
        parts.append(f"## {title}\n{text.strip()}")
    remember, recall, forget = (
        platform_name(name, spec.client_tools) for name in MEMORY_TOOL_NAMES
    )
    if spec.memory and registry.has(remember):
        parts.append(
            f"## Memory\nYou can remember durable facts about the user with {remember}, "
            f"look them up with {recall} and drop them with {forget}. Recall before "
            "answering questions that depend on what the user told you before."
        )
    final = (
        platform_name(FINAL_ANSWER, spec.client_tools) if spec.output_schema is not None else None
    )
    tools = [t for t in registry if t.name != final]
    if tools:
        guide = "\n".join(f"- {t.name}: {t.description.splitlines()[0]}" for t in tools)
        parts.append(f"## Tools\nCall a tool when it helps; you may call several at once.\n{guide}")
    if routed:
        parts.append(
            "## More tools\nYou have more tools than those listed: each step also offers "
            "the ones that fit the request. Call search_tools to find others."
        )
    if final is not None and registry.has(final):
        parts.append(f"## Answer format\nFinish by calling {final}; never answer in plain text.")
    return "\n\n".join(parts)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def instructions_digest(spec: AgentSpec) -> str:
    return digest(spec.instructions)


def tools_digest(registry: ToolRegistry) -> str:
    """Stable for the same tool schemas (order-independent), different when any changes."""
    definitions = sorted(registry.definitions("anthropic"), key=lambda d: d["name"])
    return digest(json.dumps(definitions, sort_keys=True, separators=(",", ":")))
