"""System prompt composition and configuration digests (agents/runtime/prompt.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents.memory import DjangoFactStore, MemorySettings
from agents.runtime.loop import agent_registry
from agents.runtime.prompt import compose_system_prompt, instructions_digest, tools_digest
from agents.runtime.spec import AgentSpec
from agents.runtime.structured import FINAL_ANSWER
from tools.runtime.builtins import BUILTINS
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Tool

SPEC = AgentSpec(name="helper", instructions="  You are a careful analyst.\n", model="m")


def make_tool(name: str, description: str | None = None, **properties: Any) -> Tool:
    async def handler(arguments, ctx):
        return {}

    return Tool(
        name=name,
        description=description or f"The {name} tool.\nMore details on a second line.",
        input_schema={"type": "object", "properties": properties},
        handler=handler,
    )


def test_the_prompt_has_instructions_then_context_blocks_then_the_tool_guide():
    registry = ToolRegistry([make_tool("search"), make_tool("fetch")])

    prompt = compose_system_prompt(
        SPEC, registry, [("Customer", "  Name: Ann\n"), ("Policy", "No refunds.")]
    )

    assert prompt.startswith("You are a careful analyst.\n\n## Customer\nName: Ann\n\n")
    assert "## Policy\nNo refunds." in prompt
    assert "## Tools\n" in prompt
    assert "- search: The search tool.\n- fetch: The fetch tool." in prompt
    assert "second line" not in prompt  # only each description's first line
    assert prompt.index("## Policy") < prompt.index("## Tools")
    assert "## Memory" not in prompt
    assert "## Answer format" not in prompt


def test_the_memory_section_appears_only_when_memory_is_on():
    registry = agent_registry(
        replace(SPEC, memory=True), ToolRegistry(), DjangoFactStore(MemorySettings.default())
    )

    with_memory = compose_system_prompt(replace(SPEC, memory=True), registry)
    without = compose_system_prompt(SPEC, ToolRegistry())

    assert "## Memory" in with_memory
    for name in ("remember_fact", "recall_facts", "forget_fact"):
        assert f"- {name}: " in with_memory
    assert "## Memory" not in without
    assert "remember_fact" not in without


def test_the_tool_guide_lists_builtins_and_leaves_final_answer_to_the_answer_format():
    spec = replace(SPEC, output_schema={"type": "object"})

    prompt = compose_system_prompt(spec, agent_registry(spec, BUILTINS))

    for name in BUILTINS.names():
        assert f"- {name}: " in prompt
    assert f"- {FINAL_ANSWER}:" not in prompt
    assert f"## Answer format\nFinish by calling {FINAL_ANSWER}" in prompt


def test_no_tools_and_no_instructions_leave_no_empty_sections():
    spec = replace(SPEC, instructions="   ")
    assert compose_system_prompt(spec, ToolRegistry()) == ""
    assert compose_system_prompt(spec, ToolRegistry(), [("Note", "x")]) == "## Note\nx"


def test_instructions_digest_is_stable_and_follows_the_instructions():
    same = replace(SPEC, model="another-model", temperature=0.2, max_rounds=3)

    assert instructions_digest(SPEC) == instructions_digest(SPEC)
    assert instructions_digest(SPEC) == instructions_digest(same)
    assert instructions_digest(SPEC) != instructions_digest(replace(SPEC, instructions="Other."))
    assert len(instructions_digest(SPEC)) == 64


def test_tools_digest_ignores_registration_order_and_follows_schemas():
    search, fetch = make_tool("search", q={"type": "string"}), make_tool("fetch")
    digest = tools_digest(ToolRegistry([search, fetch]))

    assert tools_digest(ToolRegistry([fetch, search])) == digest
    assert tools_digest(ToolRegistry([make_tool("search", q={"type": "string"}), fetch])) == digest
    changed_schema = make_tool("search", q={"type": "integer"})
    assert tools_digest(ToolRegistry([changed_schema, fetch])) != digest
    changed_description = make_tool("search", "Search the web.", q={"type": "string"})
    assert tools_digest(ToolRegistry([changed_description, fetch])) != digest
    assert tools_digest(ToolRegistry([search])) != digest
    assert tools_digest(ToolRegistry([search, fetch, make_tool("extra")])) != digest
