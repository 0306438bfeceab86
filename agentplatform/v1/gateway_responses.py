"""`POST /v1/responses` for gateway models: `<connection>/<model>` on an OpenAI or
OpenAI-compatible connection, or a model alias of such connections, no agent.

The Responses body is translated into Chat Completions (`responses_wire`, as for
agents), sent through the connection's ChatPassthrough, and what the provider answers is
said back in Responses' words: a completion as a `response` (a `message` item with
`output_text`, a `function_call` item per tool call, usage, status), a chunk stream as the
typed events the agent path sends (`ResponseEvents`). A provider's error becomes an error
of this API (`provider_refusal`); the call is recorded as the gateway's others are. An
alias falls back across its pairs as on the other endpoints (`gateway.Call.send`).

Nothing of a gateway response is stored: it can be neither read back (`GET
/v1/responses/{id}` answers 404) nor continued (`previous_response_id` is a 400); `store`
is accepted and changes nothing. The caller sends the whole conversation each time, as
with Chat Completions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.event_streams import SseJsonReader, event_stream_response
from agentplatform.v1.chat_request import check_sampling
from agentplatform.v1.chat_wire import (
    MAX_ERROR_CHARS,
    ChunkTally,
    content_text,
    first_choice,
)
from agentplatform.v1.endpoint import OpenAIError, parsed
from agentplatform.v1.gateway import Answered, Call, chat_for, chat_route, with_maximum
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
from providers.runtime.passthrough import json_object, token_count
from providers.services import GatewayRoute
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

    answered = await sent_or_refused(call, payload_of, stream=stream)
    if answered.rest is None:
        return JsonResponse(response_of_completion(answered.forwarded.body, ids))
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


async def sent_or_refused(
    call: Call, payload_of: Callable[[GatewayRoute], dict[str, Any]], *, stream: bool
) -> Answered:
    """`call.send` for a face that translates: a provider's refusal (its last pair's
    non-200 answer) is raised as this API's error, recorded; a whole 200 answer comes back
    recorded; a stream, to be relayed (`Call.relayed`: recorded when it ends)."""
    answered = await call.send(payload_of, stream=stream)
    if answered.rest is None:
        call.record(answered)
        if answered.forwarded.status != 200:
            raise provider_refusal(answered.forwarded.status, answered.forwarded.body)
    return answered


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


# -- errors ----------------------------------------------------------------------------------
def provider_refusal(status: int, body: bytes) -> OpenAIError:
    """A provider's non-200 answer as this API's error. The caller's mistakes (4xx) keep
    their status and the provider's message (its `param` named as Responses names it); the
    connection's own trouble (401, 403: its key; 5xx) is a 502 that says who must act. The
    body was scrubbed of the connection's key by the pass-through."""
    error = json_object(body).get("error")
    error = error if isinstance(error, dict) else {}
    message = error.get("message") if isinstance(error.get("message"), str) else ""
    message = message[:MAX_ERROR_CHARS]
    if status in (401, 403):
        return OpenAIError(
            502,
            f"The provider refused the connection's credentials (HTTP {status}): the tenant's "
            "admin must check the connection.",
            type="server_error",
            code="provider_error",
        )
    if not 400 <= status < 500:
        return OpenAIError(
            502,
            f"The provider answered HTTP {status}" + (f": {message}" if message else "."),
            type="server_error",
            code="provider_error",
        )
    kind, param, code = error.get("type"), error.get("param"), error.get("code")
    return OpenAIError(
        status,
        message or f"The provider answered HTTP {status}.",
        type=kind if isinstance(kind, str) and kind else "invalid_request_error",
        param=responses_param(param) if isinstance(param, str) else None,
        code=code if isinstance(code, str) else None,
    )


# -- a completion as a response --------------------------------------------------------------
def response_of_completion(raw: bytes, ids: ResponseIds) -> dict[str, Any]:
    """A provider's `chat.completion` as a `response`."""
    answer, choice, message = first_choice(raw)
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
