"""A gateway call, on whichever endpoint sends it (`chat`, `messages`, `responses`): its
route checked (`any_route`, `chat_route`: the key may not be limited to agents; the
connection must allow the model), what it may cost held, its body sent to the route's
pairs, its answer's stream relayed, and what was held settled and the call recorded.

Every face sends through `Call.send`: a model alias (`alias/<name>`) falls back across its
pairs there, with the same rules on every endpoint, passed through or translated; and each
pair tried is a `chat <model>` span when tracing is on (docs/fallback.md,
docs/observability.md).

What a call may cost is held before it is sent (`hold`: its input estimate and its maximum
output, priced at the pair's price when a cost limit needs it, agents.quotas) and bounds
what it may produce: a body without a maximum output is sent GATEWAY_DEFAULT_MAX_TOKENS in
its API's own field (`with_maximum`). A stream is read by a task of its own
(`Call.relayed`): a caller that leaves before its end (its usage comes last) leaves it read
on, for up to GATEWAY_STREAM_READ_ON_S. Once the answer is whole (`Call.record`), what was
held is settled at what the call used (the provider's usage, or if that never comes what
it gave, never below) and its span given its cost, in a task off the answer's path, and the
call is recorded as a run of its key (`Run.gateway_model`) in batches (docs/quotas.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from agentplatform.v1.chat_wire import MAX_ERROR_CHARS
from agentplatform.v1.endpoint import (
    OpenAIError,
    model_not_found,
    quota_error,
    require_raw_models,
)
from agents import quotas
from agents.runs import GatewayCall, record_gateway_calls
from base.stream_reads import brief, stream_read
from providers.gateway_routes import (
    GatewayRoute,
    gateway_route,
    known_gateway_route,
    retryable_status,
)
from providers.models import ProviderKind
from providers.routing import BALANCER
from providers.runtime import tracing
from providers.runtime.errors import (
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    Timeout,
    provider_failure,
)
from providers.runtime.estimates import estimate_text_tokens, output_tokens_of
from providers.runtime.fallback import call_order
from providers.runtime.passthrough import (
    ChatPassthrough,
    Forwarded,
    MessagesPassthrough,
)
from providers.runtime.types import Usage
from tenancy.authentication import ApiClient

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Call:
    """One gateway call, on whichever face: the caller's key, the model it asked for (as
    its run records it), its route, when it began, the body it sent in the provider's API
    (its last user message is the run's input) and the estimate held for it (`hold`: with
    the maximum output `with_maximum` sends when the body has none)."""

    client: ApiClient
    model: str
    route: GatewayRoute
    started: Any
    sent: dict[str, Any]
    held: quotas.Reservation

    @classmethod
    async def begun(
        cls, client: ApiClient, model: str, route: GatewayRoute, sent: dict[str, Any]
    ) -> Call:
        """The call, its estimate held (before any provider is contacted)."""
        started = timezone.now()
        return cls(client, model, route, started, sent, await hold(client, route, sent))

    async def send(
        self,
        payload_of: Callable[[GatewayRoute], dict[str, Any]],
        *,
        stream: bool,
        headers: dict[str, str] | None = None,
    ) -> Answered:
        """`payload_of(pair)` sent to the route's pairs in their order (an alias's pairs
        balanced and failing connections last, as an agent's calls: `call_order`),
        until one answers other than with a retryable failure (an HTTP 408, 429 or 5xx, a
        timeout, an unreachable provider), or the last answers: a stream falls back only
        before its answer begins, so nothing has reached the caller. A refusal (400, a bad
        key) is the answer: another pair would refuse it too, or an admin must act. A
        provider that could not be reached at all is the 502 of `unreached`. Each pair
        tried is a `chat` span (tracing on); the answering one's ends when it is recorded."""
        route = self.route
        order = (
            call_order([route, *route.fallbacks], route.balancing, BALANCER)
            if route.fallbacks
            else [route]
        )
        switches: list[dict[str, str]] = []
        for position, target in enumerate(order):
            last = position == len(order) - 1
            passthrough = target.passthrough
            assert passthrough is not None  # (an alias's connections all have one)
            payload = payload_of(target)
            span = _chat_span(self, target, payload, position).begin()
            tally, rest, first = Forwarded(), None, b""
            try:
                with BALANCER.counting(target.key):  # (a stream: until its answer begins)
                    if stream:
                        rest = passthrough.stream(payload, target.model, tally, headers)
                        first = await anext(rest, b"")  # (the status is known once it begins)
                    else:
                        tally = await passthrough.complete(payload, target.model, headers)
            except ProviderError as exc:
                _ended(span, type(exc).__qualname__)
                if last or not exc.retryable:
                    raise unreached(exc, self.held) from None
                switches.append(_switch(target, order[position + 1], exc))
                continue
            except BaseException as exc:  # (cancelled: the caller went away)
                _ended(span, type(exc).__qualname__)
                raise
            if tally.status != 200:
                span.fail(str(tally.status))
                if rest is not None:  # (a refusal comes whole: `tally` keeps it)
                    await rest.aclose()
                    rest = None
                if not last and retryable_status(tally.status):
                    span.end()
                    error = _status_error(tally.status)
                    switches.append(_switch(target, order[position + 1], error))
                    continue
            return Answered(target, tally, first, rest, tuple(switches), span)
        raise AssertionError("unreachable: the last pair answers or raises")  # pragma: no cover

    def relayed(self, answered: Answered) -> AsyncIterator[bytes]:
        """The rest of `answered`'s 200 stream (after `first`), for the caller: read by a
        task of its own, which records the call when the stream ends — read on after the
        caller leaves (closes this), for up to GATEWAY_STREAM_READ_ON_S."""
        return _Relayed(_Reader(self, answered))

    def used(self, forwarded: Forwarded) -> Usage:
        """What the call is recorded and settled at: the provider's usage once it came
        whole; else (a stream cut or left before it, a service that counts nothing) never
        below what the provider gave: the input estimate (`hold`'s) and the characters of
        its content / 4, beside what the provider did say (Messages says its input first)."""
        given = forwarded.usage
        if forwarded.status != 200 or forwarded.usage_final:
            return given
        told_input = given.input_tokens or given.cache_read_tokens or given.cache_write_tokens
        return Usage(
            input_tokens=given.input_tokens if told_input else estimated_tokens(self.sent)[0],
            output_tokens=max(given.output_tokens, output_tokens_of(forwarded.content_chars)),
            cache_read_tokens=given.cache_read_tokens,
            cache_write_tokens=given.cache_write_tokens,
        )

    def record(self, answered: Answered) -> None:
        """The call recorded in the next batch as a run of its key (the pair that answered,
        what it used (`used`), the switches before it as `provider.fallback` events), what
        was held settled with the same, and its span ended. Once, when the answer is whole
        (a stream: when the provider's ends, or its reading on after the caller left does)."""
        forwarded, target = answered.forwarded, answered.target
        usage = self.used(forwarded)
        ok = forwarded.status == 200
        span, ended_at = answered.span or None, None
        if span is not None:  # (its cost added off the answer's path: the price may query)
            ended_at = tracing.now_ns()
            if ok:
                span.answered(forwarded.model, forwarded.usage)
            else:  # (a refusal: no cost to add)
                span.end(ended_at)
                span = None
        if not self.held.empty or span is not None:
            _later(self._settled(target, usage, span, forwarded.usage, ended_at))
        _recorder.add(
            GatewayCall(
                api_key=self.client.api_key,
                gateway_model=self.model,
                model=target.model,
                provider=target.connection.kind,
                price_kind=target.connection.price_kind,
                input=_last_user_text(self.sent),
                usage=usage,
                started_at=self.started,
                finished_at=timezone.now(),
                error="" if ok else f"the provider answered HTTP {forwarded.status}",
                events=tuple(("provider.fallback", switch) for switch in answered.switches),
            )
        )

    async def _settled(
        self, target: GatewayRoute, usage: Usage, span: Any, answered: Usage, ended_at: Any
    ) -> None:
        """What was held replaced by `usage` at the answering pair's price, and `span` (given
        its answer already) given the cost of the provider's own usage `answered`, then
        ended: off the answer's path (a price may need a query)."""
        tenant_id, kind = self.client.api_key.tenant_id, target.connection.price_kind
        try:
            await quotas.settle_usage(self.held, tenant_id, kind, target.model, usage)
        finally:
            if span is not None:
                try:
                    cost = await stream_read(
                        quotas.call_cost(
                            tenant_id, kind, target.model,
                            answered.input_tokens, answered.output_tokens,
                            answered.cache_read_tokens, answered.cache_write_tokens,
                        )
                    )()  # fmt: skip
                    if cost is not None:
                        span.set(**{"agentplatform.cost_usd": float(cost)})
                finally:
                    span.end(ended_at)


@dataclass
class Answered:
    """The answer a gateway call got: the pair that gave it (after `switches`, the
    `provider.fallback` payloads of the pairs that failed before it); the provider's
    status, usage and, when whole (`rest` None: no stream, or a refusal), its body; a
    200 stream's first piece and the rest; and its `chat` span (OFF with tracing off)."""

    target: GatewayRoute
    forwarded: Forwarded
    first: bytes
    rest: AsyncIterator[bytes] | None
    switches: tuple[dict[str, str], ...]
    span: Any


def chat_for(target: GatewayRoute, chat: dict[str, Any]) -> dict[str, Any]:
    """A translated Chat Completions body as `target`'s connection takes it: OpenAI's newer
    models take `max_completion_tokens` for `max_tokens` (an alias may mix OpenAI and
    OpenAI-compatible connections)."""
    if target.connection.kind != ProviderKind.OPENAI or "max_tokens" not in chat:
        return chat
    sent = dict(chat)
    sent["max_completion_tokens"] = sent.pop("max_tokens")
    return sent


MAXIMA = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# Where a Chat Completions service reads a maximum output: OpenAI's both fields, another
# service only `max_tokens` (some ignore `max_completion_tokens`).
_READ_IN = {
    "max_completion_tokens": ("max_completion_tokens", "max_tokens"),
    "max_tokens": ("max_tokens",),
}


def maximum_field(target: GatewayRoute) -> str:
    """Where a Chat Completions body sent to `target`'s connection says its maximum
    output: OpenAI's newer models take only `max_completion_tokens`."""
    kind = target.connection.kind
    return "max_completion_tokens" if kind == ProviderKind.OPENAI else "max_tokens"


def with_maximum(body: dict[str, Any], field: str = "max_tokens") -> dict[str, Any]:
    """`body` with a maximum output where the service `field` is for reads one: the body's
    own (its largest, when it said it only in a field that service ignores), else
    GATEWAY_DEFAULT_MAX_TOKENS. A call is held for its largest maximum (`hold`): so it is
    what the provider may produce, never the model's own limit."""
    if any(body.get(name) is not None for name in _READ_IN[field]):
        return body
    given = [body[name] for name in MAXIMA if body.get(name) is not None]
    return {**body, field: max(given, default=settings.GATEWAY_DEFAULT_MAX_TOKENS)}


def positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


async def sent_or_refused(
    call: Call, payload_of: Callable[[GatewayRoute], dict[str, Any]], *, stream: bool
) -> Answered:
    """`call.send` for a face that translates (`translate`, `responses`): a
    provider's refusal (its last pair's non-200 answer) is raised as the caller's error
    (`provider_refusal`), recorded; a whole 200 answer comes back
    recorded; a stream, to be relayed (`Call.relayed`: recorded when it ends)."""
    answered = await call.send(payload_of, stream=stream)
    if answered.rest is None:
        call.record(answered)
        if answered.forwarded.status != 200:
            raise provider_refusal(answered.forwarded.status, answered.forwarded.answer)
    return answered


# -- a provider's refusal -----------------------------------------------------------------------
def provider_refusal(status: int, answer: dict[str, Any]) -> OpenAIError:
    """A provider's non-200 answer (its body as the pass-through read it) as the caller's
    error. The caller's mistakes (4xx) keep their status and the provider's message and
    `param` (in its API's words: a face that translates renames it); the connection's own
    trouble (401, 403: its key; 5xx) is a 502 that says who must act. The body was scrubbed
    of the connection's key by the pass-through."""
    error = answer.get("error")
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
        param=param if isinstance(param, str) else None,
        code=code if isinstance(code, str) else None,
    )


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


# -- spans -----------------------------------------------------------------------------------
def _chat_span(call: Call, target: GatewayRoute, payload: dict[str, Any], position: int):
    """A pair's `chat <model>` span (not yet begun; OFF with tracing off). Only numbers the
    caller sent are taken from its body, never its text."""
    if not tracing.enabled():
        return tracing.OFF
    tenant = call.client.api_key.tenant
    return tracing.chat_span(
        provider=target.connection.kind,
        model=target.model,
        tenant_id=tenant.pk,
        max_tokens=_number(payload, "max_tokens", "max_completion_tokens", integer=True),
        temperature=_number(payload, "temperature"),
        top_p=_number(payload, "top_p"),
        agentplatform__tenant=tenant.slug,
        agentplatform__gateway__model=call.model[:300],
        agentplatform__connection=target.connection.name,
        agentplatform__gateway__attempt=position + 1,
    )


def _number(body: dict[str, Any], *names: str, integer: bool = False) -> int | float | None:
    for name in names:
        value = body.get(name)
        wanted = int if integer else int | float
        if isinstance(value, wanted) and not isinstance(value, bool):
            return value
    return None


def _ended(span: Any, error_type: str) -> None:
    span.fail(error_type)
    span.end()


# -- what is held ---------------------------------------------------------------------------
def estimated_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """A call's input estimate (from its characters) and the most output it may be given:
    its maximum (GATEWAY_DEFAULT_MAX_TOKENS when it sets none: `with_maximum` sends that),
    for each of its `n` choices."""
    sent = json.dumps([body.get("messages"), body.get("system"), body.get("tools")])
    maxima = [body[name] for name in MAXIMA if positive(body.get(name))]
    output = max(maxima, default=settings.GATEWAY_DEFAULT_MAX_TOKENS)
    choices = body["n"] if positive(body.get("n")) else 1
    return estimate_text_tokens(sent), output * choices


async def hold(client: ApiClient, route: GatewayRoute, body: dict[str, Any]) -> quotas.Reservation:
    """The call's estimate held against the limits of its tenant and key before the provider
    is contacted; a limit that cannot take it is a 429 naming it."""
    key = client.api_key
    try:
        return await quotas.reserve_call(
            quotas.Meter(tenant_id=key.tenant_id, api_key_id=key.pk),
            route.connection.price_kind, route.model, *estimated_tokens(body),
        )  # fmt: skip
    except quotas.QuotaExceeded as exc:
        raise quota_error(exc) from None


def unreached(exc: ProviderError, held: quotas.Reservation) -> OpenAIError:
    """The provider could not be reached: what was held comes back; a 502 saying why."""
    if not held.empty:
        _later(quotas.settle_async(held, tokens=0))
    return OpenAIError(502, str(exc), type="server_error", code="provider_error")


# -- a stream the caller may leave -------------------------------------------------------------
_AHEAD = 8  # pieces read ahead of a caller that reads slower than the provider sends
_reading: set[asyncio.Task] = set()


class _Reader:
    """A 200 stream's rest, read from the provider by a task of its own, so that a caller
    leaving (its request cancelled) never cuts it: read on, its pieces dropped, until the
    provider's stream ends or GATEWAY_STREAM_READ_ON_S after the caller left (then closed),
    and the call recorded (`Call.record`). A caller that stops reading at `finish_reason`
    has had the whole answer; its usage comes after."""

    def __init__(self, call: Call, answered: Answered) -> None:
        self.pieces: asyncio.Queue[bytes | None] = asyncio.Queue()  # None: the end
        self.room = asyncio.Semaphore(_AHEAD)
        self.failure: Exception | None = None
        self.left = False
        self._deadline: asyncio.Timeout | None = None
        self.task = asyncio.get_running_loop().create_task(self._read(call, answered))
        _reading.add(self.task)
        self.task.add_done_callback(_reading.discard)

    async def _read(self, call: Call, answered: Answered) -> None:
        assert answered.rest is not None
        try:
            async with asyncio.timeout(None) as self._deadline:
                if self.left:
                    self._deadline.reschedule(_read_on_until())
                async for piece in answered.rest:
                    if not self.left:
                        await self.room.acquire()
                        self.pieces.put_nowait(piece)
        except TimeoutError:
            pass  # read on for as long as it may be: closed, counted from what it gave
        except Exception as exc:  # (the caller's to see, as if it had read it itself)
            self.failure = exc
            if self.left:
                logger.exception("a gateway stream read on for its usage failed")
        finally:
            self.pieces.put_nowait(None)
            call.record(answered)
            await answered.rest.aclose()

    def leave(self) -> None:
        """The caller is gone: read on, until the deadline, for no one."""
        if self.left or self.task.done():
            return
        self.left = True
        while not self.pieces.empty():
            self.pieces.get_nowait()
        self.room.release()  # (a reader waiting for room goes on)
        if self._deadline is not None:  # (else it is set as the reader begins)
            self._deadline.reschedule(_read_on_until())


def _read_on_until() -> float:
    return asyncio.get_running_loop().time() + settings.GATEWAY_STREAM_READ_ON_S


class _Relayed:
    """The caller's side of a `_Reader`: its pieces as they come; closed (or dropped
    unread), the caller has left."""

    def __init__(self, reader: _Reader) -> None:
        self._reader = reader
        self._ended = False

    def __aiter__(self) -> _Relayed:
        return self

    async def __anext__(self) -> bytes:
        if self._ended:
            raise StopAsyncIteration
        piece = await self._reader.pieces.get()
        if piece is None:
            self._ended = True
            if self._reader.failure is not None:
                raise self._reader.failure
            raise StopAsyncIteration
        self._reader.room.release()
        return piece

    async def aclose(self) -> None:
        self._ended = True
        self._reader.leave()

    def __del__(self) -> None:
        if not self._ended and not self._reader.task.done():
            with suppress(RuntimeError):  # (its loop closed: nothing is read any more)
                self._reader.leave()


async def flush_gateway_calls() -> None:
    """What this process holds written: streams still read on after their callers left
    (each ends GATEWAY_STREAM_READ_ON_S after its caller did) recorded, the record's batch
    written, and the settlements made. At shutdown, and in tests."""
    if _reading:
        await asyncio.wait(set(_reading), timeout=settings.GATEWAY_STREAM_READ_ON_S + 5)
    await _recorder.flush()
    if _settling:
        await asyncio.wait(set(_settling), timeout=30)


# -- off the answer's path ---------------------------------------------------------------------
def _later(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _settling.add(task)
    task.add_done_callback(_settling.discard)


_settling: set[asyncio.Task] = set()


class _Recorder:
    """Gateway calls recorded as runs of their keys in batches, one INSERT for all those of
    about FLUSH_S: one per call took the gateway from 229 to 123 requests/s, and batches of
    50 ms instead of 250 cost 0.4 ms more CPU per call at 170 calls/s (bench/gateway.py). A
    process stopped with SIGTERM writes what it holds (`flush_gateway_calls`, at lifespan
    shutdown)."""

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
