"""A gateway model's call on its connection's own API (`/v1/chat/completions` to a Chat
Completions connection, `/v1/messages` to an Anthropic one): the body goes on as it came but
for `model` (`forwarded`: the caller's tools, structured output, images and streaming pass
through as the provider takes them; providers.runtime.passthrough), and the provider's
answer comes back byte for byte, for the Django view (`forward`) or the gateway's own door.

The key is checked and throttled as for agents before this is asked (the faces, `door`);
the call is held, sent, settled and recorded by `call.Call`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from agentplatform.v1.endpoint import OpenAIError
from agentplatform.v1.gateway.call import MAXIMA, Call, maximum_field, positive, with_maximum
from providers.gateway_routes import GatewayRoute
from providers.runtime.passthrough import MessagesPassthrough
from tenancy.authentication import ApiClient


def is_gateway_model(body: Any) -> bool:
    """Agent and crew slugs have no `/`; gateway model ids do."""
    return isinstance(body, dict) and isinstance(body.get("model"), str) and "/" in body["model"]


@dataclass
class GatewayAnswer:
    """What the provider answered, for either door to send (`forward` for the Django view,
    `door` on its own): a whole body, or a stream of SSE pieces."""

    status: int
    content_type: str
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    STREAM_HEADERS: ClassVar = (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))


def _check(body: dict[str, Any], kind: type) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "`messages` must be a non-empty list.", param="messages")
    if body.get("stream") not in (None, True, False):
        raise OpenAIError(400, "`stream` must be a boolean.", param="stream")
    if kind is MessagesPassthrough and body.get("max_tokens") is None:
        raise OpenAIError(400, "`max_tokens` is required.", param="max_tokens")
    # What is held is what these allow the provider to produce: they must be what they say.
    for name in (*MAXIMA, "n"):
        if body.get(name) is not None and not positive(body[name]):
            raise OpenAIError(400, f"`{name}` must be a positive integer.", param=name)


async def forwarded(
    body: dict[str, Any],
    client: ApiClient,
    route: GatewayRoute,
    *,
    stream: bool,
    headers: dict[str, str] | None = None,
) -> GatewayAnswer:
    """`body` sent to `route`'s connection in its own API, unchanged but for `model`;
    `client` is the caller's checked key. A model alias falls back across its pairs
    (`Call.send`), each switch a `provider.fallback` event of the call's record."""
    assert route.passthrough is not None
    _check(body, type(route.passthrough))
    call = await Call.begun(client, body["model"], route, body)

    def payload_of(target: GatewayRoute) -> dict[str, Any]:
        return with_maximum(body, maximum_field(target))  # (the caller's own kept as sent)

    answered = await call.send(payload_of, stream=stream, headers=headers)
    if answered.rest is None:
        call.record(answered)
        whole = answered.forwarded
        return GatewayAnswer(whole.status, whole.content_type, whole.body)
    stream_of = _relay(answered.first, call.relayed(answered))
    return GatewayAnswer(200, "text/event-stream", stream=stream_of)


async def forward(
    request: HttpRequest,
    body: dict[str, Any],
    client: ApiClient,
    route: GatewayRoute,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    """`forwarded`, answered through Django (`?stream=true` streams too)."""
    stream = bool(body.get("stream")) or request.GET.get("stream") == "true"
    answer = await forwarded(body, client, route, stream=stream, headers=headers)
    if answer.stream is None:
        return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
    response = StreamingHttpResponse(answer.stream, content_type=answer.content_type)
    for name, value in GatewayAnswer.STREAM_HEADERS:
        response[name] = value
    return response


async def _relay(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async with aclosing(rest):  # (closed: the caller left)
        yield first
        async for piece in rest:
            yield piece
