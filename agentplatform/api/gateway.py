"""Gateway models: `/v1/chat/completions` (OpenAI and OpenAI-compatible connections) or
`/v1/messages` (Anthropic connections) with `model` = `<connection>/<model>` goes straight
to that provider connection, no agent (providers.runtime.passthrough): the caller's tools,
structured output, images and streaming pass through as the provider takes them.

The key is checked and throttled as for agents (and may not be limited to agents); the
connection must allow the model. Each call is recorded as a run of its key with its usage
(`Run.gateway_model`), written once the answer is on its way, off the request's path.
A model on a connection of the other API is translated (`gateway_translate`), except on
/v1/responses, which goes to Chat Completions connections only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils import timezone

from agentplatform.api.openai_base import OpenAIError, model_not_found, require_raw_models
from agentplatform.stream_reads import brief, stream_read
from agentplatform.tenancy.authentication import ApiClient
from agents.services import GatewayCall, record_gateway_calls
from providers.runtime.errors import ProviderError
from providers.runtime.passthrough import ChatPassthrough, Forwarded, MessagesPassthrough
from providers.services import GatewayRoute, gateway_route, known_gateway_route

logger = logging.getLogger(__name__)


def is_gateway_model(body: Any) -> bool:
    """Agent and crew slugs have no `/`; gateway model ids do."""
    return isinstance(body, dict) and isinstance(body.get("model"), str) and "/" in body["model"]


_SERVED = {
    ChatPassthrough: "/v1/chat/completions",
    MessagesPassthrough: "/v1/messages or /v1/chat/completions",
}


async def _route(client: ApiClient, model: str, kind: type | None) -> GatewayRoute:
    require_raw_models(client)
    route = None
    if len(model) <= 300:
        route = known_gateway_route(client.tenant, model)
        route = route or await brief(gateway_route)(client.tenant, model)
    if route is None:
        raise model_not_found(model)
    if route.passthrough is None or (kind is not None and not isinstance(route.passthrough, kind)):
        where = _SERVED.get(type(route.passthrough))
        raise OpenAIError(
            400,
            f"`{model}` is on a {route.connection.get_kind_display()} connection: "
            + (f"send it to {where}." if where else "it has no model to call."),
            param="model",
        )
    return route


async def any_route(client: ApiClient, model: str) -> GatewayRoute:
    """The route of a gateway model served through either API (the caller's face
    translates when it is the other one)."""
    return await _route(client, model, None)


async def chat_route(client: ApiClient, model: str) -> GatewayRoute:
    """The route of a gateway model served through Chat Completions, for a face that
    translates into it (/v1/responses): a model of another API is a 400 naming its endpoint."""
    return await _route(client, model, ChatPassthrough)


def _check(body: dict[str, Any], kind: type) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "`messages` must be a non-empty list.", param="messages")
    if body.get("stream") not in (None, True, False):
        raise OpenAIError(400, "`stream` must be a boolean.", param="stream")
    if kind is MessagesPassthrough and body.get("max_tokens") is None:
        raise OpenAIError(400, "`max_tokens` is required.", param="max_tokens")


def messages_headers(request: HttpRequest) -> dict[str, str]:
    """The caller's `anthropic-version` and `anthropic-beta` headers, passed on to an
    Anthropic connection."""
    return {
        name: request.headers[name]
        for name in ("anthropic-version", "anthropic-beta")
        if request.headers.get(name) and request.headers[name].isascii()
    }


async def forward(
    request: HttpRequest,
    body: dict[str, Any],
    client: ApiClient,
    route: GatewayRoute,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    """`body` sent to `route`'s connection in its own API, answered as it came; `client`
    is the caller's checked key."""
    model = body["model"]
    passthrough = route.passthrough
    assert passthrough is not None
    _check(body, type(passthrough))
    started = timezone.now()
    if body.get("stream") or request.GET.get("stream") == "true":
        tally = Forwarded()
        stream = passthrough.stream(body, route.model, tally, headers)
        try:
            first = await anext(stream, b"")  # (the status is known once the answer begins)
        except ProviderError as exc:
            raise OpenAIError(502, str(exc), type="server_error", code="provider_error") from None
        if tally.status != 200:
            _record_later(client, model, route, tally, started, body)
            return HttpResponse(first, status=tally.status, content_type=tally.content_type)
        response = StreamingHttpResponse(
            _relay(first, stream, client, model, route, tally, started, body),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    try:
        forwarded = await passthrough.complete(body, route.model, headers)
    except ProviderError as exc:
        raise OpenAIError(502, str(exc), type="server_error", code="provider_error") from None
    _record_later(client, model, route, forwarded, started, body)
    return HttpResponse(
        forwarded.body, status=forwarded.status, content_type=forwarded.content_type
    )


async def _relay(first, stream, client, model, route, tally, started, body) -> AsyncIterator[bytes]:
    try:
        yield first
        async for piece in stream:
            yield piece
    finally:
        _record_later(client, model, route, tally, started, body)


# -- the record ------------------------------------------------------------------------------
def _record_later(client, model, route, forwarded: Forwarded, started, body) -> None:
    ok = forwarded.status == 200
    _recorder.add(
        GatewayCall(
            api_key=client.api_key,
            gateway_model=model,
            model=route.model,
            provider=route.connection.kind,
            input=_last_user_text(body),
            usage=forwarded.usage,
            started_at=started,
            finished_at=timezone.now(),
            error="" if ok else f"the provider answered HTTP {forwarded.status}",
        )
    )


def record_gateway_call(
    client: ApiClient,
    model: str,
    route: GatewayRoute,
    forwarded: Forwarded,
    started: Any,
    body: dict[str, Any],
) -> None:
    """A call through `route` recorded in the next batch; `body` is the Chat Completions
    body that was sent (its last user message is the run's input)."""
    _record_later(client, model, route, forwarded, started, body)


class _Recorder:
    """Gateway calls written in batches, one INSERT for all those of about FLUSH_S: one per
    call took the gateway from 229 to 123 requests/s, and batches of 50 ms instead of 250
    cost 0.4 ms more CPU per call at 170 calls/s (bench/gateway.py). A process stopped with
    SIGTERM writes what it holds (`flush_gateway_calls`, at lifespan shutdown)."""

    FLUSH_S = 0.25

    def __init__(self) -> None:
        self.pending: list[GatewayCall] = []
        self.flushing: asyncio.Task | None = None

    def add(self, call: GatewayCall) -> None:
        self.pending.append(call)
        if self.flushing is None:
            self.flushing = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        try:
            await asyncio.sleep(self.FLUSH_S)
            await self.flush()
        finally:
            self.flushing = None

    async def flush(self) -> None:
        while self.pending:
            calls, self.pending = self.pending, []
            try:
                await stream_read(record_gateway_calls)(calls)
            except Exception:
                logger.exception("%d gateway calls were not recorded", len(calls))


_recorder = _Recorder()


async def flush_gateway_calls() -> None:
    await _recorder.flush()


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(
                    p["text"]
                    for p in content
                    if isinstance(p, dict) and isinstance(p.get("text"), str)
                )
            if isinstance(content, str):
                return content
    return ""
