"""The gateway's own door: a gateway model called on its own API (`/v1/chat/completions`
to a Chat Completions connection, `/v1/messages` to an Anthropic one) answered without
Django's request path, which was 0.3-0.4 ms of the 1.5-2 ms of CPU such a call costs the
web process, and so of its added latency (bench/gateway.py; issue #17 asks ≤ 3 ms).

It takes only the plainest calls, with the same functions the view uses (`verified_key`,
the policy, the throttles, `known_gateway_route`, `gateway.forwarded`, OpenAIError):
a key this process has verified before, a small JSON body naming a gateway model whose
route this process knows, an allowed Host, no query string, and Django's security headers
known in advance (no SSL redirect, no HSTS). Anything else — a first call, an agent, a
translation, a bad body, a refused key — goes to the Django view with the body already
read, which answers exactly as before: the door never answers what the view would answer
differently, it only skips the work of getting there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from django.conf import settings
from django.http import HttpResponse
from django.http.request import split_domain_port, validate_host
from django.middleware.security import SecurityMiddleware

from agentplatform.v1.endpoint import INLINE_PARSE_BYTES, OpenAIError, throttled
from agentplatform.v1.gateway.forward import GatewayAnswer, forwarded, is_gateway_model
from providers.gateway_routes import known_gateway_route
from providers.runtime.passthrough import ChatPassthrough, MessagesPassthrough
from tenancy.api_keys import verified_key
from tenancy.authentication import ApiClient
from tenancy.policy import Action, Principal

logger = logging.getLogger(__name__)

_DOORS = {"/v1/chat/completions": ChatPassthrough, "/v1/messages": MessagesPassthrough}
_ANTHROPIC_HEADERS = (b"anthropic-version", b"anthropic-beta")


def with_gateway_door(api_app):
    """ASGI: the plain gateway calls answered here, everything else by `api_app` (the
    `/v1` Django handler), which gets the body this door has read."""
    fixed = None if settings.USE_X_FORWARDED_HOST else _security_headers()

    async def door(scope, receive, send):
        kind = _DOORS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if kind is None or fixed is None or scope["method"] != "POST" or scope["query_string"]:
            return await api_app(scope, receive, send)
        read = await _body(receive)
        if read is None:
            return  # the caller left
        raw, complete = read
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        within = limit is None or len(raw) <= limit
        call = _plain_call(scope, raw, kind) if complete and within else None
        if call is None:  # (a body over the limit: the view answers 413)
            return await api_app(scope, _replay(raw, complete, receive), send)
        await _answered(call, scope, receive, send, fixed)

    return door


class _Call:
    def __init__(self, body, client, route, headers, anthropic) -> None:
        self.body, self.client, self.route = body, client, route
        self.headers, self.anthropic = headers, anthropic


def _plain_call(scope, raw: bytes, kind: type) -> _Call | None:
    """The call, when it is one this door answers as the view would; else None."""
    if len(raw) > INLINE_PARSE_BYTES:
        return None
    headers = dict(scope["headers"])  # (a repeated header: the view reads the last one too)
    domain, _ = split_domain_port(headers.get(b"host", b"").decode("latin-1"))
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    anthropic = kind is MessagesPassthrough
    token = _bearer(headers, anthropic)
    key = verified_key(token) if token else None
    if key is None or key.allowed_agents or not Principal.of_key(key).may(Action.START_RUN):
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not is_gateway_model(body) or len(body["model"]) > 300:
        return None
    if anthropic and body.get("thread") is not None:
        return None  # (the view refuses it)
    route = known_gateway_route(key.tenant, body["model"])
    if route is None or not isinstance(route.passthrough, kind):
        return None
    passed = {}
    if anthropic:
        for name in _ANTHROPIC_HEADERS:
            value = headers.get(name, b"").decode("latin-1")
            if value and value.isascii():
                passed[name.decode()] = value
    return _Call(body, ApiClient(api_key=key), route, passed or None, anthropic)


def _bearer(headers: dict[bytes, bytes], anthropic: bool) -> str:
    """The key as the view reads it: `Authorization: Bearer`, or (Messages) `x-api-key`."""
    header = headers.get(b"authorization", b"").decode("latin-1")
    if not header and anthropic:
        header = "Bearer " + headers.get(b"x-api-key", b"").decode("latin-1")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _answered(call: _Call, scope, receive, send, fixed: list) -> None:
    """The call answered, raced against the caller leaving (which cancels it, as Django's
    handler does: a provider stream is not read on for no one)."""

    async def answer() -> None:
        try:
            await throttled(call.client)
            found = await forwarded(
                call.body,
                call.client,
                call.route,
                stream=bool(call.body.get("stream")),
                headers=call.headers,
            )
        except OpenAIError as exc:
            response = exc.response(call.anthropic)
            await _send_whole(send, response.status_code, response, fixed)
            return
        await _send_answer(send, found, fixed)

    answering = asyncio.create_task(answer())
    leaving = asyncio.create_task(_until_disconnect(receive))
    try:
        await asyncio.wait([answering, leaving], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (answering, leaving):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if answering.done() and not answering.cancelled() and answering.exception() is not None:
        logger.error(
            "The gateway's door failed on %s", scope["path"], exc_info=answering.exception()
        )
        error = OpenAIError(
            500, "The server had an error processing the request.", type="server_error"
        )
        with contextlib.suppress(Exception):  # (unless the answer had begun)
            await _send_whole(send, 500, error.response(call.anthropic), fixed)


async def _send_answer(send, found: GatewayAnswer, fixed: list) -> None:
    headers = [(b"content-type", found.content_type.encode("latin-1")), *fixed]
    if found.stream is None:
        headers.append((b"content-length", str(len(found.body)).encode()))
        await send({"type": "http.response.start", "status": found.status, "headers": headers})
        await send({"type": "http.response.body", "body": found.body})
        return
    for name, value in GatewayAnswer.STREAM_HEADERS:
        headers.append((name.lower().encode(), value.encode()))
    await send({"type": "http.response.start", "status": found.status, "headers": headers})
    async with contextlib.aclosing(found.stream) as pieces:  # (it records the call)
        async for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _send_whole(send, status: int, response: HttpResponse, fixed: list) -> None:
    headers = [(name.lower().encode(), value.encode("latin-1")) for name, value in response.items()]
    headers += [*fixed, (b"content-length", str(len(response.content)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


async def _body(receive) -> tuple[bytes, bool] | None:
    """The body, read until it is whole or past DATA_UPLOAD_MAX_MEMORY_SIZE: (bytes,
    whether that is all of it), or None when the caller left."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        parts.append(chunk)
        size += len(chunk)
        if not message.get("more_body"):
            return b"".join(parts), True
        if limit and size > limit:
            return b"".join(parts), False  # the view answers 413 as it reads the rest


def _replay(raw: bytes, complete: bool, receive):
    """`receive` for the view: the body read so far, then the rest from the caller."""
    given = False

    async def replayed():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": raw, "more_body": not complete}
        return await receive()

    return replayed


async def _until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Plain:
    def is_secure(self) -> bool:
        return False


def _security_headers() -> list[tuple[bytes, bytes]] | None:
    """The headers Django's SecurityMiddleware adds to a `/v1` answer, or None when they
    depend on the request (an SSL redirect, HSTS): then every call goes to the view."""
    middleware = SecurityMiddleware(lambda request: HttpResponse())
    if middleware.redirect or middleware.sts_seconds:
        return None
    response = middleware.process_response(_Plain(), HttpResponse())
    return [
        (name.lower().encode(), value.encode("latin-1"))
        for name, value in response.items()
        if name.lower() != "content-type"
    ]
