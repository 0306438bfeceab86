"""`POST /v1/responses` for gateway models: `<connection>/<model>` on an OpenAI or
OpenAI-compatible connection, or a model alias of such connections, no agent.

The Responses body is translated into Chat Completions (`responses_wire`, as for
agents), sent through the connection's ChatPassthrough, and what the provider answers is
said back in Responses' words: a completion as a `response` (a `message` item with
`output_text`, a `function_call` item per tool call, usage, status), a chunk stream as the
typed events the agent path sends (`ResponseEvents`). A provider's error becomes an error
of this API (`call.provider_refusal`); the call is recorded as the gateway's others are. An
alias falls back across its pairs as on the other endpoints (`call.Call.send`).

Nothing of a gateway response is stored: it can be neither read back (`GET
/v1/responses/{id}` answers 404) nor continued (`previous_response_id` is a 400); `store`
is accepted and changes nothing. The caller sends the whole conversation each time, as
with Chat Completions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.event_streams import SseJsonReader, event_stream_response
from agentplatform.v1.chat_request import check_sampling
from agentplatform.v1.chat_wire import (
    ChunkTally,
    content_text,
    first_choice,
)
from agentplatform.v1.endpoint import OpenAIError, parsed
from agentplatform.v1.gateway.call import Call, chat_for, chat_route, sent_or_refused, with_maximum
from agentplatform.v1.responses_wire import (
    PREFIX,
    ResponseEvents,
    function_call_item,
    message_item,
    response_object,
    responses_as_chat,
    responses_param,
    usage_object,
)
from agentplatform.v1.shapes.base import BadRequest
from providers.gateway_routes import GatewayRoute
from providers.runtime.passthrough import token_count
from tenancy.authentication import ApiClient

NOT_CHAINED = (
    "`previous_response_id` is not supported for gateway models (`<connection>/<model>`): "
    "their responses are not stored. Send the whole conversation in `input`."
)
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


async def gateway_responses(
    request: HttpRequest, body: dict[str, Any], client: ApiClient
) -> HttpResponse:
    """`body` (a Responses request naming a gateway model) answered by its connection (a
    model alias: by its pairs, falling back as on the other endpoints); `client` is the
    caller's checked key."""
    model = body["model"]
    route = await chat_route(client, model)
    try:
        chat = await parsed(chat_body_of, body, size=len(request.body))
    except BadRequest as exc:
        raise OpenAIError(400, str(exc), param=responses_param(exc.param)) from None
    ids = ResponseIds.new(model, chat["max_tokens"])
    call = await Call.begun(client, model, route, chat)
    stream = body.get("stream") is True

    def payload_of(target: GatewayRoute) -> dict[str, Any]:
        sent = chat_for(target, chat)  # a stream's usage chunk is ours:
        return {**sent, "stream_options": {"include_usage": True}} if stream else sent

    try:
        answered = await sent_or_refused(call, payload_of, stream=stream)
    except OpenAIError as exc:  # (a provider's refusal: its `param` in Responses' words)
        exc.param = responses_param(exc.param)
        raise
    if answered.rest is None:
        return JsonResponse(response_of_completion(answered.forwarded.answer, ids))
    events = stream_events(answered.first, call.relayed(answered), ids)
    return event_stream_response(events)


def chat_body_of(body: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions body sent for `body` (without `stream`: the pass-through sets
    it; `chat_for` adapts it to each connection), with its maximum output (`with_maximum`:
    the response's `max_output_tokens` says it)."""
    if body.get("previous_response_id") is not None:
        raise BadRequest(NOT_CHAINED, "previous_response_id")
    for name in ("stream", "store"):
        if body.get(name) not in (None, True, False):
            raise BadRequest(f"`{name}` must be a boolean.", name)
    chat = responses_as_chat(body)
    check_sampling(chat)
    chat.pop("stream", None)
    return with_maximum(chat)


@dataclass(frozen=True)
class ResponseIds:
    """A gateway response's ids (not a run's: the call is recorded after it is answered),
    and the maximum output its call was sent."""

    model: str
    response: str
    message: str
    created_at: int
    max_output_tokens: int | None = None

    @classmethod
    def new(cls, model: str, max_output_tokens: int | None = None) -> ResponseIds:
        token = uuid.uuid4().hex
        created = int(time.time())
        return cls(model, f"{PREFIX}{token}", f"msg_{token}", created, max_output_tokens)


# -- a completion as a response --------------------------------------------------------------
def response_of_completion(answer: dict[str, Any], ids: ResponseIds) -> dict[str, Any]:
    """A provider's `chat.completion` (as the pass-through read it) as a `response`."""
    choice, message = first_choice(answer)
    output: list[dict[str, Any]] = []
    text, refusal = content_text(message.get("content")), message.get("refusal")
    if text or (isinstance(refusal, str) and refusal):
        item = message_item(ids.message, text)
        if not text:
            item["content"] = []
        if isinstance(refusal, str) and refusal:
            item["content"].append({"type": "refusal", "refusal": refusal})
        output.append(item)
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        call_id = call.get("id")
        name = function.get("name")
        output.append(
            function_call_item(
                call_id if isinstance(call_id, str) and call_id else _call_id(),
                name if isinstance(name, str) else "",
                arguments,
            )
        )
    status, incomplete = _status(choice.get("finish_reason"))
    return response_object(
        ids.response,
        ids.created_at,
        ids.model,
        status=status,
        output=output,
        usage=_usage(answer.get("usage")),
        incomplete=incomplete,
        max_output_tokens=ids.max_output_tokens,
    )


def _status(finish_reason: Any) -> tuple[str, dict[str, Any] | None]:
    reason = _INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def _usage(raw: Any) -> dict[str, Any] | None:
    """Chat Completions usage as Responses usage (the input tokens include the cached ones
    in both)."""
    if not isinstance(raw, dict):
        return None

    def detail(name: str, key: str) -> int:
        details = raw.get(name)
        return token_count(details.get(key)) if isinstance(details, dict) else 0

    return usage_object(
        token_count(raw.get("prompt_tokens")),
        token_count(raw.get("completion_tokens")),
        cached=detail("prompt_tokens_details", "cached_tokens"),
        reasoning=detail("completion_tokens_details", "reasoning_tokens"),
    )


# -- a chunk stream as events ----------------------------------------------------------------
@dataclass
class _StreamState(ChunkTally):
    """What the provider's chunks said so far."""

    reader: SseJsonReader = field(default_factory=SseJsonReader)
    # Function calls whose name has not come yet: their id and the arguments so far.
    nameless: dict[Any, tuple[str, list[str]]] = field(default_factory=dict)

    def chunks(self, piece: bytes) -> list[dict[str, Any]]:
        """The JSON chunks that `piece` completes (`[DONE]` and comments skipped)."""
        return self.reader.feed(piece)


async def stream_events(
    first: bytes, stream: AsyncIterator[bytes], ids: ResponseIds
) -> AsyncIterator[bytes]:
    """The provider's chunk stream (`first`, then `stream`, closed when this is) as typed
    events. A stream that ends without a finish reason, or with an error chunk, ends with
    `response.failed`."""
    events = ResponseEvents(message_id=ids.message)
    state = _StreamState()

    def response(status: str, **extra: Any) -> dict[str, Any]:
        return response_object(
            ids.response, ids.created_at, ids.model, status=status, output=events.output,
            usage=_usage(state.usage), max_output_tokens=ids.max_output_tokens, **extra,
        )  # fmt: skip

    yield events.begin(response("in_progress"))
    async with aclosing(stream):
        piece: bytes | None = first
        while piece is not None:
            out = b"".join(_translated(chunk, events, state) for chunk in state.chunks(piece))
            if out:
                yield out
            if state.error:
                break
            piece = await anext(stream, None)
    out = b""
    if state.error is None:  # (a last event that came without its blank line)
        out = b"".join(_translated(chunk, events, state) for chunk in state.chunks(b"\n\n"))
    out += _named_late(events, state) + events.finish()
    if state.error is None and state.finish_reason is None:
        state.error = "The provider's stream ended before its answer was complete."
    if state.error is not None:
        failed = response("failed", error={"code": "server_error", "message": state.error})
        yield out + events.failed(failed)
        return
    status, incomplete = _status(state.finish_reason)
    yield out + events.completed(response(status, incomplete=incomplete))


def _translated(chunk: dict[str, Any], events: ResponseEvents, state: _StreamState) -> bytes:
    """One `chat.completion.chunk` as events (or what it says of the end, kept in `state`)."""
    delta = state.delta_of(chunk)
    if delta is None:
        return b""
    out = b""
    content = delta.get("content")
    if isinstance(content, str) and content:
        out += events.text(content)
    calls = delta.get("tool_calls")
    for position, piece in enumerate(calls if isinstance(calls, list) else []):
        if isinstance(piece, dict):
            out += _call_piece(piece, position, events, state)
    return out


def _call_piece(
    piece: dict[str, Any], position: int, events: ResponseEvents, state: _StreamState
) -> bytes:
    """A tool call's delta: the call opened once its name is known, then its arguments."""
    index = piece.get("index")
    key = index if isinstance(index, int) and not isinstance(index, bool) else position
    function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
    arguments = function.get("arguments")
    arguments = arguments if isinstance(arguments, str) else ""
    if events.has_call(key):
        return events.arguments(key, arguments) if arguments else b""
    call_id, earlier = state.nameless.pop(key, (None, []))
    if call_id is None:
        call_id = (
            piece.get("id") if isinstance(piece.get("id"), str) and piece["id"] else _call_id()
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        state.nameless[key] = (call_id, [*earlier, arguments])
        return b""
    out = events.call(key, call_id, name)
    text = "".join([*earlier, arguments])
    return out + (events.arguments(key, text) if text else b"")


def _named_late(events: ResponseEvents, state: _StreamState) -> bytes:
    """Calls whose name never came, opened at the end (the provider judges them next time)."""
    out = b""
    for key, (call_id, pieces) in state.nameless.items():
        out += events.call(key, call_id, "")
        if "".join(pieces):
            out += events.arguments(key, "".join(pieces))
    state.nameless.clear()
    return out


# -- small helpers ---------------------------------------------------------------------------
def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
