"""A run's outcome claim and its evidence: the tool results its answer rests on, as the
claim records them (verified by agents/verification.py). Bounded, so a claim stays a small
record."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agents.runtime.spec import RunOutcome, RunStatus
from agents.runtime.structured import FINAL_ANSWER
from providers.runtime.types import AssistantMessage, Message, ToolResultMessage

MAX_ITEMS = 20  # the latest results; a note says how many were left out
MAX_RESULT_CHARS = 2000


def outcome_claim(outcome: RunOutcome) -> dict[str, Any] | None:
    """The claim a run records with its outcome: None unless it succeeded."""
    if outcome.status != RunStatus.SUCCEEDED:
        return None
    text = outcome.output
    if not text and outcome.structured_output is not None:
        text = json.dumps(outcome.structured_output, ensure_ascii=False)
    return {"text": text, "evidence": outcome.evidence}


def evidence(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The run's tool results (the latest MAX_ITEMS), each with the call that gave it."""
    calls = {
        call.id: call
        for message in messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    }
    items = []
    for message in messages:
        if not isinstance(message, ToolResultMessage) or message.name == FINAL_ANSWER:
            continue
        call = calls.get(message.call_id)
        item = {
            "call_id": message.call_id,
            "tool": message.name,
            "arguments": call.arguments if call is not None else {},
            "result": message.content[:MAX_RESULT_CHARS],
            "is_error": message.is_error,
        }
        if len(message.content) > MAX_RESULT_CHARS:
            item["truncated"] = True
        items.append(item)
    return items[-MAX_ITEMS:]
