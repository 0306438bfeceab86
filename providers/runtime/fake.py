"""FakeModel: a ModelAdapter that plays back a script, for runtime tests.

Each request consumes the next scripted output, in order:

- a `str`: a text answer (stop_reason "end");
- a `ModelResponse`: returned as is (its model id filled in when empty);
- a `ToolCall` or a list of them: a response with those calls (stop_reason "tool_calls");
- an exception instance: raised, as a provider error would be (e.g. `RateLimited`);
- a `Stream([...])`: stream events and exceptions emitted in order, for mid-stream failures.

It never makes up text: a request with nothing left to play back fails the test.
Usage is counted in words (see `word_usage`) so tests can assert roll-ups exactly.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, replace

from providers.runtime.types import (
    AssistantMessage,
    Done,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultMessage,
    Usage,
    UsageEvent,
    UserMessage,
)
from tools.runtime.tool import ToolCall

_EVENT_TYPES = (TextDelta, ToolCallEvent, UsageEvent, Done)


@dataclass(frozen=True)
class Stream:
    """Stream events and exceptions to emit in order.

    `stream()` emits the events and raises each exception where it stands; when no
    `Done` is scripted, one with the assembled response closes the stream. `complete()`
    assembles the same events into a response: text deltas joined, tool calls in order,
    usage summed (or the scripted `Done`'s response, if any).
    """

    items: Sequence[StreamEvent | BaseException]

    def __post_init__(self) -> None:
        items = tuple(self.items)
        for item in items:
            if not isinstance(item, (*_EVENT_TYPES, BaseException)):
                raise TypeError(f"Stream items are stream events or exceptions, not {item!r}")
        object.__setattr__(self, "items", items)


Output = str | ModelResponse | ToolCall | Sequence[ToolCall] | BaseException | Stream


class FakeModel:
    provider = "fake"

    def __init__(self, outputs: Iterable[Output] = (), *, model: str = "fake-model") -> None:
        self.model = model
        self.requests: list[ModelRequest] = []
        self._outputs: deque[Output] = deque()
        self.add(*outputs)

    def add(self, *outputs: Output) -> None:
        """Queue more outputs; a kind FakeModel cannot play back is refused here."""
        for output in outputs:
            self._outputs.append(_checked(output))

    @property
    def remaining(self) -> int:
        """How many scripted outputs are still queued."""
        return len(self._outputs)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        output = self._next(request)
        if isinstance(output, BaseException):
            raise output
        if isinstance(output, Stream):
            events = []
            for item in output.items:
                if isinstance(item, BaseException):
                    raise item
                events.append(item)
            return self._assemble(events)
        return self._response(output, self.requests[-1])

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The request is logged and its output taken now; scripted exceptions are
        raised while iterating, where a provider's would be."""
        output = self._next(request)
        return self._emit(output, self.requests[-1])

    # -- internals ---------------------------------------------------------------------
    def _next(self, request: ModelRequest) -> Output:
        # A snapshot: a caller that keeps appending to its message list must not
        # change what this request was.
        snapshot = replace(request, messages=tuple(request.messages), tools=tuple(request.tools))
        self.requests.append(snapshot)
        if not self._outputs:
            last = repr(snapshot.messages[-1]) if snapshot.messages else "no messages"
            if len(last) > 300:
                last = last[:300] + "..."
            raise AssertionError(
                f"FakeModel has no more scripted outputs; got request #{len(self.requests)} "
                f"for model {snapshot.model!r}, last message: {last}"
            )
        return self._outputs.popleft()

    async def _emit(self, output: Output, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if isinstance(output, BaseException):
            raise output
        if isinstance(output, Stream):
            emitted: list[StreamEvent] = []
            for item in output.items:
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Done):
                    item = Done(self._with_model(item.response))
                emitted.append(item)
                yield item
            if not any(isinstance(event, Done) for event in emitted):
                yield Done(self._assemble(emitted))
            return
        for event in response_events(self._response(output, request)):
            yield event

    def _response(
        self, output: str | ModelResponse | ToolCall | Sequence[ToolCall], request: ModelRequest
    ) -> ModelResponse:
        if isinstance(output, ModelResponse):
            return self._with_model(output)
        if isinstance(output, str):
            response = ModelResponse(text=output, stop_reason="end", model=self.model)
        else:
            calls = (output,) if isinstance(output, ToolCall) else tuple(output)
            response = ModelResponse(tool_calls=calls, stop_reason="tool_calls", model=self.model)
        return replace(response, usage=word_usage(request, response))

    def _assemble(self, events: Sequence[StreamEvent]) -> ModelResponse:
        for event in events:
            if isinstance(event, Done):
                return self._with_model(event.response)
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        calls = tuple(e.call for e in events if isinstance(e, ToolCallEvent))
        usage = sum((e.usage for e in events if isinstance(e, UsageEvent)), Usage())
        return ModelResponse(
            text=text,
            tool_calls=calls,
            stop_reason="tool_calls" if calls else "end",
            usage=usage,
            model=self.model,
        )

    def _with_model(self, response: ModelResponse) -> ModelResponse:
        return response if response.model else replace(response, model=self.model)


def _checked(output: Output) -> Output:
    if isinstance(output, str | ModelResponse | ToolCall | BaseException | Stream):
        return output
    if isinstance(output, list | tuple):
        calls = tuple(output)
        if calls and all(isinstance(call, ToolCall) for call in calls):
            return calls
        raise ValueError(f"a list output must hold one or more ToolCalls, not {output!r}")
    raise TypeError(
        "FakeModel outputs are str, ModelResponse, ToolCall, a list of ToolCall, "
        f"an exception instance or Stream, not {type(output).__name__}"
    )


def text_chunks(text: str, parts: int = 3) -> list[str]:
    """`text` cut into at most `parts` non-empty pieces that join back to it exactly."""
    count = min(parts, len(text))
    bounds = [round(i * len(text) / count) for i in range(count + 1)] if count else []
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def response_events(response: ModelResponse) -> list[StreamEvent]:
    """How a whole response streams: text in 2-3 deltas, each tool call, usage, Done."""
    events: list[StreamEvent] = [TextDelta(chunk) for chunk in text_chunks(response.text)]
    events += [ToolCallEvent(call) for call in response.tool_calls]
    events += [UsageEvent(response.usage), Done(response)]
    return events


def count_words(text: str) -> int:
    return len(text.split())


def _call_words(calls: Iterable[ToolCall]) -> int:
    return sum(
        count_words(call.name) + count_words(json.dumps(call.arguments, sort_keys=True))
        for call in calls
    )


def word_usage(request: ModelRequest, response: ModelResponse) -> Usage:
    """Deterministic stand-in for token counts. Input: the words of every message's text,
    tool call (name and JSON arguments) and tool result; the system prompt is not counted.
    Output: the words of the answer's text and tool calls."""
    words_in = 0
    for message in request.messages:
        if isinstance(message, UserMessage):
            words_in += count_words(message.text)
        elif isinstance(message, AssistantMessage):
            words_in += count_words(message.text) + _call_words(message.tool_calls)
        elif isinstance(message, ToolResultMessage):
            words_in += count_words(message.content)
    words_out = count_words(response.text) + _call_words(response.tool_calls)
    return Usage(input_tokens=words_in, output_tokens=words_out)
