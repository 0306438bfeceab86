from __future__ import annotations

import asyncio
import json

from providers.runtime.adapter import ModelAdapter
from providers.runtime.offline import OfflineModel
from providers.runtime.types import (
    AssistantMessage,
    Done,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCallEvent,
    ToolResultMessage,
    UsageEvent,
    UserMessage,
)
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.tool import Tool, ToolCall, ToolResult

MODEL = OfflineModel()
TOOLS = tuple(BUILTINS)


def request(*messages, tools=TOOLS) -> ModelRequest:
    return ModelRequest(model="anything", messages=list(messages), tools=tools)


def complete(req: ModelRequest) -> ModelResponse:
    return asyncio.run(MODEL.complete(req))


def stream(req: ModelRequest) -> list:
    async def collect() -> list:
        return [event async for event in MODEL.stream(req)]

    return asyncio.run(collect())


def as_message(result: ToolResult) -> ToolResultMessage:
    if result.is_error:
        return ToolResultMessage(result.call_id, result.name, result.error, is_error=True)
    return ToolResultMessage(result.call_id, result.name, json.dumps(result.result))


def test_it_is_a_model_adapter():
    assert isinstance(MODEL, ModelAdapter) and MODEL.provider == "offline"


def test_the_calculator_round_trip_through_the_real_builtins():
    question = UserMessage("Calculator:  2+2 ")
    asked = complete(request(question))
    call = ToolCall("offline_1", "calculator", {"expression": "2+2"})
    assert asked.tool_calls == (call,) and asked.stop_reason == "tool_calls"
    assert asked.model == "offline-demo" and asked.text == ""

    result = asyncio.run(BUILTINS.execute(asked.tool_calls[0], RunContext(tenant_id=1)))
    assert result.result == {"result": 4}

    answer = complete(request(question, asked.as_message(), as_message(result)))
    assert answer.text.startswith("4 ") and "offline demo" in answer.text
    assert "calculator" in answer.text and answer.tool_calls == ()
    assert answer.stop_reason == "end" and answer.model == "offline-demo"


def test_a_failed_tool_is_reported_plainly():
    call = ToolCall("offline_1", "calculator", {"expression": "1/0"})
    result = asyncio.run(BUILTINS.execute(call, RunContext(tenant_id=1)))
    assert result.is_error
    answer = complete(
        request(
            UserMessage("calculator: 1/0"), AssistantMessage(tool_calls=(call,)), as_message(result)
        )
    )
    assert answer.text.startswith(f"The calculator tool failed: {result.error}")
    assert "offline demo" in answer.text


def test_a_result_that_is_not_a_single_key_object_is_shown_whole():
    content = json.dumps({"iso": "2025-01-01T00:00:00+00:00", "timezone": "UTC"})
    answer = complete(request(ToolResultMessage("c", "current_time", content)))
    assert answer.text.startswith(content)
    plain = complete(request(ToolResultMessage("c", "lookup", "plain words")))
    assert plain.text.startswith("plain words (offline demo: this is the lookup tool's result")


def test_several_trailing_results_are_all_reported():
    answer = complete(
        request(
            UserMessage("x"),
            ToolResultMessage("a", "calculator", '{"result": 4}'),
            ToolResultMessage("b", "think", '{"thought": "hmm"}'),
            ToolResultMessage("c", "current_time", "bad zone", is_error=True),
        )
    )
    assert "calculator: 4" in answer.text and "think: hmm" in answer.text
    assert "The current_time tool failed: bad zone" in answer.text
    assert "offline demo" in answer.text


def test_a_json_object_input_is_the_arguments():
    asked = complete(request(UserMessage('current_time: {"timezone": "Europe/Paris"}')))
    assert asked.tool_calls == (
        ToolCall("offline_1", "current_time", {"timezone": "Europe/Paris"}),
    )


def test_the_only_string_property_takes_plain_input_even_when_optional():
    asked = complete(request(UserMessage("current_time: Asia/Kolkata")))
    assert asked.tool_calls[0].arguments == {"timezone": "Asia/Kolkata"}
    empty = complete(request(UserMessage("current_time:")))
    assert empty.tool_calls[0].arguments == {}


def test_call_ids_count_the_calls_already_made():
    earlier = ToolCall("offline_1", "think", {"thought": "a"})
    asked = complete(
        request(
            UserMessage("think: a"),
            AssistantMessage(tool_calls=(earlier,)),
            ToolResultMessage("offline_1", "think", '{"thought": "a"}'),
            AssistantMessage("a (offline demo)"),
            UserMessage("think: b"),
        )
    )
    assert asked.tool_calls == (ToolCall("offline_2", "think", {"thought": "b"}),)


def test_a_tool_without_a_single_string_parameter_asks_for_json():
    def add(arguments, ctx):
        return arguments["a"] + arguments["b"]

    adder = Tool(
        name="add",
        description="Add two numbers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        handler=add,
    )
    answer = complete(request(UserMessage("add: 1 and 2"), tools=(adder,)))
    assert answer.tool_calls == () and "JSON" in answer.text
    assert "a (required)" in answer.text and "b (required)" in answer.text
    assert "offline demo" in answer.text
    called = complete(request(UserMessage('add: {"a": 1, "b": 2}'), tools=(adder,)))
    assert called.tool_calls == (ToolCall("offline_1", "add", {"a": 1, "b": 2}),)


def test_a_tool_not_offered_gets_the_notice():
    only_think = (BUILTINS.get("think"),)
    answer = complete(request(UserMessage("calculator: 2+2"), tools=only_think))
    assert answer.tool_calls == ()
    assert answer.text.startswith("This is the offline demo model")
    assert "Available tools: think." in answer.text and "calculator: 2+2" not in answer.text


def test_tool_choice_none_calls_nothing():
    req = ModelRequest(
        model="m", messages=[UserMessage("calculator: 2+2")], tools=TOOLS, tool_choice="none"
    )
    answer = complete(req)
    assert answer.tool_calls == () and "offline demo model" in answer.text


def test_the_notice_is_honest_and_lists_the_tools():
    answer = complete(request(UserMessage("What is the capital of France?")))
    assert "no language model is connected" in answer.text
    assert "Provider connections" in answer.text and "Paris" not in answer.text
    assert "`calculator: 2+2`" in answer.text
    assert "Available tools: calculator, current_time, llm, think" in answer.text
    bare = complete(request(UserMessage("hello"), tools=()))
    assert "no language model is connected" in bare.text and "Available tools" not in bare.text
    assert complete(request()).text.startswith("This is the offline demo model")


def test_it_is_deterministic():
    req = request(UserMessage("calculator: 3*3"))
    assert complete(req) == complete(req) == complete(request(UserMessage("calculator: 3*3")))
    notice = request(UserMessage("hi there"))
    assert complete(notice) == complete(notice)
    assert complete(notice).usage.input_tokens == 2


def test_streaming_gives_the_same_answer_as_complete():
    for req in [
        request(UserMessage("tell me a story")),
        request(UserMessage("c"), ToolResultMessage("c1", "calculator", '{"result": 4}')),
    ]:
        events = stream(req)
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert 2 <= len(deltas) <= 3
        assert "".join(d.text for d in deltas) == complete(req).text
        assert events[-2:] == [UsageEvent(complete(req).usage), Done(complete(req))]


def test_streaming_a_tool_call_gives_a_tool_call_event():
    req = request(UserMessage("calculator: 2+2"))
    events = stream(req)
    assert [type(e) for e in events] == [ToolCallEvent, UsageEvent, Done]
    assert events[0].call == ToolCall("offline_1", "calculator", {"expression": "2+2"})
    assert events[-1] == Done(complete(req))
