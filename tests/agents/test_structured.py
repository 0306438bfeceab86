"""Structured output (agents/runtime/structured.py) through the agent loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunOutcome, RunStatus
from agents.runtime.structured import FINAL_ANSWER, final_answer_tool
from providers.runtime.fake import FakeModel
from providers.runtime.types import ToolResultMessage, UserMessage
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.tool import ToolCall

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "number"}},
    "required": ["city", "temp_c"],
    "additionalProperties": False,
}
ANSWER = {"city": "Paris", "temp_c": 21.5}


def structured_spec(**overrides: Any) -> AgentSpec:
    return AgentSpec(
        name="weather",
        instructions="Report the weather.",
        model="fake-model",
        **{"output_schema": WEATHER, **overrides},
    )


def go(model: FakeModel, spec: AgentSpec | None = None) -> RunOutcome:
    return asyncio.run(
        run_agent(
            spec=spec or structured_spec(),
            adapter=model,
            registry=BUILTINS,
            ctx=CTX,
            input="weather in Paris?",
        )
    )


def answer(call_id: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(call_id, FINAL_ANSWER, arguments)


def test_final_answer_is_offered_to_the_model_and_a_valid_call_is_the_answer():
    model = FakeModel([answer("f1", ANSWER)])

    outcome = go(model)

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.structured_output == ANSWER
    assert json.loads(outcome.output) == ANSWER
    (request,) = model.requests
    offered = {t.name: t for t in request.tools}
    assert FINAL_ANSWER in offered and "calculator" in offered
    assert offered[FINAL_ANSWER].input_schema == WEATHER
    assert f"Finish by calling {FINAL_ANSWER}" in request.system


def test_no_final_answer_tool_without_an_output_schema():
    model = FakeModel(["Sunny."])
    outcome = go(model, structured_spec(output_schema=None))
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.structured_output is None
    assert FINAL_ANSWER not in {t.name for t in model.requests[0].tools}


def test_invalid_final_answer_arguments_get_an_error_and_a_valid_retry_succeeds():
    model = FakeModel([answer("f1", {"city": "Paris"}), answer("f2", ANSWER)])

    outcome = go(model)

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.structured_output == ANSWER
    error = model.requests[1].messages[-1]
    assert isinstance(error, ToolResultMessage)
    assert (error.call_id, error.name, error.is_error) == ("f1", FINAL_ANSWER, True)
    assert error.content.startswith("invalid arguments: ")
    assert "temp_c" in error.content


def test_more_invalid_final_answers_than_structured_retries_fail_the_run():
    model = FakeModel(
        [answer("f1", {"city": 1}), answer("f2", {"temp_c": "warm"}), answer("f3", ANSWER)]
    )

    outcome = go(model, structured_spec(structured_retries=1))

    assert outcome.status is RunStatus.FAILED
    assert outcome.error == f"no valid {FINAL_ANSWER} was given"
    assert outcome.structured_output is None
    assert len(model.requests) == 2
    assert model.remaining == 1


def test_a_plain_text_answer_when_a_schema_is_required_asks_for_final_answer():
    model = FakeModel(["It is 21.5 degrees in Paris.", answer("f1", ANSWER)])

    outcome = go(model)

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.structured_output == ANSWER
    assert model.requests[1].messages[-1] == UserMessage(
        f"Give your answer by calling the {FINAL_ANSWER} tool."
    )


def test_plain_text_answers_also_count_against_structured_retries():
    model = FakeModel(["Sunny.", "Still sunny.", "Sunny, I said."])

    outcome = go(model, structured_spec(structured_retries=1))

    assert outcome.status is RunStatus.FAILED
    assert outcome.error == f"no valid {FINAL_ANSWER} was given"
    assert outcome.output == "Still sunny."
    assert model.remaining == 1


def test_final_answer_tool_validates_against_the_schema():
    item = final_answer_tool(WEATHER)
    assert item.validate(ANSWER) is None
    assert item.validate({"city": "Paris"}) is not None
    assert item.validate({**ANSWER, "extra": True}) is not None
