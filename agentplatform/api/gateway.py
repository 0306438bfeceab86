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
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils import timezone

from agentplatform.api.openai_base import (
    OpenAIError,
    model_not_found,
    quota_error,
    require_raw_models,
)
from agentplatform.stream_reads import brief, stream_read
from agentplatform.tenancy.authentication import ApiClient
from agents import quotas
from agents.services import GatewayCall, record_gateway_calls
from providers.routing import BALANCER, gateway_order, retryable_status
from providers.runtime.errors import (
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    Timeout,
    provider_failure,
)
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


@dataclass
class GatewayAnswer:
    """What the provider answered, for either door to send (`as_http_response` for the
    Django view, `gateway_asgi` on its own): a whole body, or a stream of SSE pieces."""

    status: int
    content_type: str
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    STREAM_HEADERS: ClassVar = (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))


async def forwarded(
    body: dict[str, Any],
    client: ApiClient,
    route: GatewayRoute,
    *,
    stream: bool,
    headers: dict[str, str] | None = None,
) -> GatewayAnswer:
    """`body` sent to `route`'s connection in its own API; `client` is the caller's checked
    key. The call is recorded once answered (a stream: once it ends or is left). A model
    alias's route falls back to its next pair on a retryable failure (an HTTP 408, 429 or
    5xx answer, a timeout, an unreachable provider) before its answer began; each switch is
    a `provider.fallback` event of the call's record."""
    model = body["model"]
    assert route.passthrough is not None
    _check(body, type(route.passthrough))
    started = timezone.now()
    held = await hold(client, route, body)  # (before any provider is contacted)
    order = gateway_order(route)
    switches: list[dict[str, str]] = []
    for position, target in enumerate(order):
        last = position == len(order) - 1
        passthrough = target.passthrough
        assert passthrough is not None  # (an alias's connections all have one)
        try:
            with BALANCER.counting(target.key):  # (a stream: until its answer begins)
                if stream:
                    tally = Forwarded()
                    pieces = passthrough.stream(body, target.model, tally, headers)
                    first = await anext(pieces, b"")  # (the status is known once it begins)
                else:
                    answer = await passthrough.complete(body, target.model, headers)
        except ProviderError as exc:
            if last or not exc.retryable:
                raise unreached(exc, held) from None
            switches.append(_switch(target, order[position + 1], exc))
            continue
        status = tally.status if stream else answer.status
        if not last and retryable_status(status):
            if stream:
                await pieces.aclose()
            switches.append(_switch(target, order[position + 1], _status_error(status)))
            continue
        if not stream:
            _record_later(client, model, target, answer, started, body, switches, held)
            return GatewayAnswer(answer.status, answer.content_type, answer.body)
        if tally.status != 200:
            _record_later(client, model, target, tally, started, body, switches, held)
            return GatewayAnswer(tally.status, tally.content_type, first)
        relay = _relay(first, pieces, client, model, target, tally, started, body, switches, held)
        return GatewayAnswer(200, "text/event-stream", stream=relay)
    raise AssertionError("unreachable: the last pair answers or raises")  # pragma: no cover


def _status_error(status: int) -> ProviderError:
    if status == 429:
        return RateLimited(f"HTTP {status}")
    if status == 408:
        return Timeout(f"HTTP {status}")
    return ProviderUnavailable(f"HTTP {status}")


def _switch(failed: GatewayRoute, following: GatewayRoute, error: ProviderError) -> dict[str, str]:
    """A `provider.fallback` event's payload: the reason in our words (provider_failure)."""
    reason = provider_failure(error, failed.connection.name, failed.model)
    return {"from": failed.label, "to": following.label, "reason": reason}


# -- quotas ----------------------------------------------------------------------------------
def estimated_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """A call's input (from its characters) and output (its maximum) token estimates."""
    sent = json.dumps([body.get("messages"), body.get("system"), body.get("tools")])
    output = next(
        (
            body[name]
            for name in ("max_completion_tokens", "max_tokens", "max_output_tokens")
            if isinstance(body.get(name), int) and body[name] > 0
        ),
        settings.QUOTA_GATEWAY_OUTPUT_ESTIMATE,  # (a call that sets no maximum output)
    )
    return quotas.estimate_text_tokens(sent), output


async def hold(client: ApiClient, route: GatewayRoute, body: dict[str, Any]) -> quotas.Reservation:
    """The call's estimate held against the limits of its tenant and key before the provider
    is contacted (agents.quotas); a limit that cannot take it is a 429 naming it."""
    input_tokens, output_tokens = estimated_tokens(body)
    try:
        return await quotas.reserve_async(
            _meter(client),
            tokens=input_tokens + output_tokens,
            cost_usd=quotas.call_cost(
                client.api_key.tenant_id, route.connection.price_kind, route.model,
                input_tokens, output_tokens,
            ),
        )  # fmt: skip
    except quotas.QuotaExceeded as exc:
        raise quota_error(exc) from None


def _meter(client: ApiClient) -> quotas.Meter:
    return quotas.Meter(tenant_id=client.api_key.tenant_id, api_key_id=client.api_key.pk)


def _settle_later(held: quotas.Reservation, route: GatewayRoute, usage: Any) -> None:
    """The reservation replaced by the call's usage, off the answer's path."""
    if held.empty:
        return
    cost = quotas.call_cost(
        route.connection.tenant_id, route.connection.price_kind, route.model, usage.input_tokens,
        usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
    )  # fmt: skip
    settling = quotas.settle_async(
        held, tokens=usage.input_tokens + usage.output_tokens, cost_usd=cost
    )
    task = asyncio.get_running_loop().create_task(settling)
    _settling.add(task)
    task.add_done_callback(_settling.discard)


_settling: set[asyncio.Task] = set()


def unreached(exc: ProviderError, held: quotas.Reservation) -> OpenAIError:
    """The provider could not be reached: what was held comes back; a 502 saying why."""
    if not held.empty:
        task = asyncio.get_running_loop().create_task(quotas.settle_async(held, tokens=0))
        _settling.add(task)
        task.add_done_callback(_settling.discard)
    return OpenAIError(502, str(exc), type="server_error", code="provider_error")


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


async def _relay(
    first, stream, client, model, route, tally, started, body, switches=(), held=None
) -> AsyncIterator[bytes]:
    try:
        yield first
        async for piece in stream:
            yield piece
    finally:
        _record_later(client, model, route, tally, started, body, switches, held)


# -- the record ------------------------------------------------------------------------------
def _record_later(
    client, model, route, forwarded: Forwarded, started, body, switches=(), held=None
) -> None:
    if held is not None:
        _settle_later(held, route, forwarded.usage)
    ok = forwarded.status == 200
    _recorder.add(
        GatewayCall(
            api_key=client.api_key,
            gateway_model=model,
            model=route.model,
            provider=route.connection.kind,
            price_kind=route.connection.price_kind,
            input=_last_user_text(body),
            usage=forwarded.usage,
            started_at=started,
            finished_at=timezone.now(),
            error="" if ok else f"the provider answered HTTP {forwarded.status}",
            events=tuple(("provider.fallback", switch) for switch in switches),
        )
    )


def record_gateway_call(
    client: ApiClient,
    model: str,
    route: GatewayRoute,
    forwarded: Forwarded,
    started: Any,
    body: dict[str, Any],
    held: quotas.Reservation | None = None,
) -> None:
    """A call through `route` recorded in the next batch; `body` is the Chat Completions
    body that was sent (its last user message is the run's input). `held` (from `hold`) is
    settled with the call's usage."""
    _record_later(client, model, route, forwarded, started, body, held=held)


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
