"""Structured output as a synthetic tool, so it works on every provider."""

from __future__ import annotations

from typing import Any

from tools.runtime.tool import Capability, Effect, Tool

FINAL_ANSWER = "final_answer"


def final_answer_tool(schema: dict[str, Any]) -> Tool:
    """The registry validates the arguments against `schema`; a valid call is the answer."""

    async def accept(arguments: dict, ctx) -> dict:
        return {"accepted": True}

    return Tool(
        name=FINAL_ANSWER,
        description=(
            "Give your final answer by calling this tool with arguments that match its "
            "schema. Call it exactly once, when you are done; do not answer in plain text."
        ),
        input_schema=schema,
        handler=accept,
        tags=frozenset({"synthetic"}),
        capability=Capability(effect=Effect.NONE, timeout_s=5),
    )
