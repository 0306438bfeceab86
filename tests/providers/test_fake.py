from __future__ import annotations

import asyncio

import pytest

from providers.runtime.adapter import ModelAdapter
from providers.runtime.errors import ModelBehaviorError, ProviderUnavailable, RateLimited
from providers.runtime.fake import FakeModel, Stream
from providers.runtime.types import (
    AssistantMessage,
    Done,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCallEvent,
    ToolResultMessage,
    Usage,
    UsageEvent,
    UserMessage,
)
from tools.runtime.tool import ToolCall


def request(*texts: str) -> ModelRequest:
    return ModelRequest(model="m", messages=[UserMessage(text) for text in texts])


def complete(model: FakeModel, req: ModelRequest) -> ModelResponse:
    return asyncio.run(model.complete(req))


def stream(model: FakeModel, req: ModelRequest) -> list:
    async def collect() -> list:
        return [event async for event in model.stream(req)]

    return asyncio.run(collect())


def stream_until_error(model: FakeModel, req: ModelRequest) -> tuple[list, BaseException]:
    events: list = []

    async def collect() -> None:
        async for event in model.stream(req):
            events.append(event)

    with pytest.raises(Exception) as caught:
        asyncio.run(collect())
    return events, caught.value


def test_it_is_a_model_adapter():
    model = FakeModel()
    assert isinstance(model, ModelAdapter) and model.provider == "fake"


def test_a_string_is_a_text_answer_with_word_usage():
    response = complete(FakeModel(["four is the answer"]), request("what is two plus two"))
    assert response == ModelResponse(
        text="four is the answer",
        stop_reason="end",
        usage=Usage(input_tokens=5, output_tokens=4),
        model="fake-model",
    )


def test_usage_counts_every_message_kind():
    call = ToolCall("c1", "calculator", {"expression": "2+2"})
    req = ModelRequest(
        model="m",
        system="not counted at all",
        messages=[
            UserMessage("add two and two"),  # 4
            AssistantMessage("let me see", (call,)),  # 3 + name 1 + '{"expression": "2+2"}' 2
            ToolResultMessage("c1", "calculator", '{"result": 4}'),  # 2
        ],
    )
    assert complete(FakeModel(["4"]), req).usage == Usage(input_tokens=12, output_tokens=1)


def test_a_model_response_is_returned_as_is_with_the_model_id_filled():
    scripted = ModelResponse(text="hi", stop_reason="max_tokens", usage=Usage(7, 3))
    other = ModelResponse(text="yo", model="claude-x")
    model = FakeModel([scripted, other], model="fake-2")
    assert complete(model, request("a")) == ModelResponse(
        text="hi", stop_reason="max_tokens", usage=Usage(7, 3), model="fake-2"
    )
    assert complete(model, request("b")) is other


def test_a_tool_call_or_a_list_of_them_asks_for_tools():
    one = ToolCall("c1", "calculator", {"expression": "1+1"})
    two = ToolCall("c2", "think", {"thought": "hm"})
    model = FakeModel([one, [one, two]])
    first = complete(model, request("x"))
    assert first.tool_calls == (one,) and first.stop_reason == "tool_calls" and first.text == ""
    assert first.model == "fake-model" and first.usage == Usage(1, 3)
    second = complete(model, request("x"))
    assert second.tool_calls == (one, two) and second.stop_reason == "tool_calls"


def test_exceptions_are_raised_in_order_between_answers():
    model = FakeModel([RateLimited("slow down", retry_after=2), "ok"])
    model.add(ModelBehaviorError("bad json", call_id="c1", raw="{"), "again")
    with pytest.raises(RateLimited) as limited:
        complete(model, request("1"))
    assert limited.value.retry_after == 2
    assert complete(model, request("2")).text == "ok"
    with pytest.raises(ModelBehaviorError, match="bad json"):
        stream(model, request("3"))
    assert complete(model, request("4")).text == "again"
    assert model.remaining == 0


def test_it_logs_every_request_in_order_even_failed_ones():
    model = FakeModel([ProviderUnavailable("down"), "a", "b"])
    reqs = [request("one"), request("two"), request("three")]
    with pytest.raises(ProviderUnavailable):
        complete(model, reqs[0])
    complete(model, reqs[1])
    stream(model, reqs[2])
    assert model.requests == [
        ModelRequest(model="m", messages=(UserMessage("one"),)),
        ModelRequest(model="m", messages=(UserMessage("two"),)),
        ModelRequest(model="m", messages=(UserMessage("three"),)),
    ]


def test_the_log_is_a_snapshot_of_a_growing_message_list():
    messages = [UserMessage("hi")]
    model = FakeModel(["a"])
    complete(model, ModelRequest(model="m", messages=messages))
    messages.append(AssistantMessage("a"))
    assert model.requests[0].messages == (UserMessage("hi"),)


def test_an_empty_queue_is_a_test_bug_that_names_the_request():
    model = FakeModel(["only one"])
    complete(model, request("first"))
    with pytest.raises(AssertionError, match=r"no more scripted outputs.*'second'"):
        complete(model, request("second"))
    with pytest.raises(AssertionError, match="no more scripted outputs"):
        stream(model, request("third"))


def test_unplayable_outputs_are_refused_when_queued():
    with pytest.raises(TypeError):
        FakeModel([42])
    with pytest.raises(ValueError):
        FakeModel([[]])
    with pytest.raises(ValueError):
        FakeModel().add(["not a call"])
    with pytest.raises(TypeError):
        Stream(["not an event"])


def test_streaming_a_string_gives_deltas_usage_and_done():
    events = stream(FakeModel(["four is the answer"]), request("two plus two"))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert 2 <= len(deltas) <= 3 and all(d.text for d in deltas)
    assert "".join(d.text for d in deltas) == "four is the answer"
    assert events[len(deltas) :] == [
        UsageEvent(Usage(3, 4)),
        Done(ModelResponse(text="four is the answer", usage=Usage(3, 4), model="fake-model")),
    ]


def test_streaming_tool_calls_gives_one_event_per_call():
    one = ToolCall("c1", "calculator", {"expression": "1+1"})
    two = ToolCall("c2", "think", {"thought": "hm"})
    events = stream(FakeModel([[one, two]]), request("x"))
    assert [type(e) for e in events] == [ToolCallEvent, ToolCallEvent, UsageEvent, Done]
    assert [events[0].call, events[1].call] == [one, two]
    assert events[-1].response.tool_calls == (one, two)
    assert events[-1].response.stop_reason == "tool_calls"


def test_streaming_a_model_response_streams_its_text_calls_and_usage():
    call = ToolCall("c1", "think", {"thought": "x"})
    scripted = ModelResponse(text="thinking", tool_calls=(call,), usage=Usage(5, 6))
    events = stream(FakeModel([scripted]), request("x"))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "thinking"
    assert events[-3:] == [
        ToolCallEvent(call),
        UsageEvent(Usage(5, 6)),
        Done(
            ModelResponse(
                text="thinking", tool_calls=(call,), usage=Usage(5, 6), model="fake-model"
            )
        ),
    ]


def test_streaming_the_same_output_ends_with_what_complete_returns():
    for output in ["a longer answer of words", ToolCall("c", "think", {"thought": "t"})]:
        completed = complete(FakeModel([output]), request("q"))
        assert stream(FakeModel([output]), request("q"))[-1] == Done(completed)


def test_a_stream_fails_midway_after_its_first_events():
    model = FakeModel([Stream([TextDelta("Hel"), TextDelta("lo"), ProviderUnavailable("cut")])])
    events, error = stream_until_error(model, request("x"))
    assert events == [TextDelta("Hel"), TextDelta("lo")]
    assert isinstance(error, ProviderUnavailable)


def test_a_stream_without_done_is_closed_with_the_assembled_response():
    call = ToolCall("c1", "think", {"thought": "t"})
    script = Stream([TextDelta("a "), TextDelta("b"), ToolCallEvent(call), UsageEvent(Usage(1, 2))])
    events = stream(FakeModel([script]), request("x"))
    assert events[:-1] == list(script.items)
    assert events[-1] == Done(
        ModelResponse(
            text="a b",
            tool_calls=(call,),
            stop_reason="tool_calls",
            usage=Usage(1, 2),
            model="fake-model",
        )
    )


def test_complete_on_a_stream_assembles_it_or_raises_its_error():
    script = Stream(
        [TextDelta("a "), UsageEvent(Usage(1, 0)), TextDelta("b"), UsageEvent(Usage(0, 2))]
    )
    assert complete(FakeModel([script]), request("x")) == ModelResponse(
        text="a b", usage=Usage(1, 2), model="fake-model"
    )
    failing = Stream([TextDelta("a"), RateLimited("later")])
    with pytest.raises(RateLimited):
        complete(FakeModel([failing]), request("x"))


def test_a_scripted_done_is_the_response():
    done = Done(ModelResponse(text="final", stop_reason="max_tokens"))
    script = Stream([TextDelta("fin"), TextDelta("al"), done])
    expected = ModelResponse(text="final", stop_reason="max_tokens", model="fake-model")
    assert complete(FakeModel([script]), request("x")) == expected
    events = stream(FakeModel([script]), request("x"))
    assert events == [TextDelta("fin"), TextDelta("al"), Done(expected)]


def test_stream_logs_the_request_when_called():
    model = FakeModel(["a"])
    model.stream(request("x"))
    assert len(model.requests) == 1 and model.remaining == 0
