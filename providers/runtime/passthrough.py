"""A caller's request sent on to the provider as it came: the gateway's path (`/v1` with a
`<connection>/<model>` model; no agent, no translation).

`ChatPassthrough` forwards Chat Completions to an OpenAI-compatible service,
`MessagesPassthrough` Messages to Anthropic. Only `model` is replaced (and a Chat
Completions stream asks for `stream_options.include_usage`, so the call's tokens are
known; that usage chunk is passed on only when the caller asked for it too). What the
provider answers goes back byte for byte, errors included (with the connection's key
scrubbed). Going through the SDKs instead would cost about 1 ms of CPU per call in
building and parsing pydantic objects the caller never sees; the HTTP is
providers.runtime.http1's (see there why not httpx2).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.runtime.clients import PerLoop
from providers.runtime.errors import ProviderUnavailable
from providers.runtime.http1 import Origin, checked_headers
from providers.runtime.sdk_errors import redact
from providers.runtime.types import Usage
from tools.runtime.egress import EgressError, EgressPolicy

_USAGE_ONLY = re.compile(rb'"choices"\s*:\s*\[\s*\]')
# The string fields that carry a model's output in either API's answers and events: text,
# tool arguments, reasoning, refusals. Counted as written (escapes make it err high).
_CONTENT = re.compile(
    rb'"(?:content|text|arguments|partial_json|refusal|reasoning_content|reasoning|thinking)"'
    rb'\s*:\s*"((?:[^"\\]|\\.)*)"'
)


@dataclass
class Forwarded:
    """What the provider answered: its status, content type and body, and a whole body read
    as JSON (`answer`: a completion, a message or a refusal, read once here for every face;
    {} when it is none); the usage and the model it says it used (where it said so beside
    the usage); whether that usage is the answer's whole count (`usage_final`: Chat
    Completions' usage chunk, Messages' `message_delta`), and the characters of the content
    it gave (`content_chars`). A stream fills them in as it goes."""

    status: int = 0
    content_type: str = ""
    body: bytes = b""
    answer: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    usage_final: bool = False
    content_chars: int = 0


def content_chars(data: bytes) -> int:
    """The characters of model output in an answer or some of its events (`_CONTENT`)."""
    return sum(len(found.group(1)) for found in _CONTENT.finditer(data))


class _Passthrough:
    path = ""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        policy: EgressPolicy | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + self.path
        self._api_key = api_key
        fixed = {"content-type": "application/json", **dict(headers or {})}
        fixed.update(self._auth(api_key))
        self._headers = fixed
        try:
            self._header_lines: bytes | None = checked_headers(fixed.items())
        except ValueError:
            self._header_lines = None  # said on each request (a connection's bad header)
        self._origins = PerLoop(
            lambda: Origin(base_url, policy=policy or EgressPolicy(), timeout_s=timeout_s),
            close=lambda origin: origin.close(),
        )

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.url!r})"

    # -- what a flavour says -------------------------------------------------------------
    def _auth(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _usage(self, answer: dict[str, Any]) -> Usage:
        raise NotImplementedError

    def _streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body a stream is asked with."""
        return {**body, "stream": True}

    def _event(self, event: bytes, tally: Forwarded, body: dict[str, Any]) -> bool:
        """Count what `event` says of usage; False to leave it out of the caller's stream."""
        raise NotImplementedError

    # -- forwarding ------------------------------------------------------------------------
    def _without_key(self, data: bytes) -> bytes:
        """A 200 answer as it came, but never with the connection's key in it (a cheap
        check; an error body gets the thorough `_scrubbed`)."""
        if self._api_key and self._api_key.encode() in data:
            return data.replace(self._api_key.encode(), b"[redacted]")
        return data

    def _scrubbed(self, body: bytes) -> bytes:
        return redact(body.decode("utf-8", "replace"), self._api_key).encode()

    def _failure(self, exc: Exception) -> str:
        """What the caller is told: the egress's and http1's messages are written for them
        (a host, a timeout, a refusal), never a library's."""
        return f"the provider could not be reached: {exc}"

    def _lines(self, headers: Mapping[str, str] | None) -> bytes:
        """The request's header lines: the connection's, and the caller's passed on (those
        replace the connection's of the same name)."""
        if self._header_lines is None:
            raise ValueError("the connection's extra headers are not valid HTTP headers")
        if not headers:
            return self._header_lines
        names = {name.lower() for name in headers}
        kept = [(n, v) for n, v in self._headers.items() if n.lower() not in names]
        return checked_headers([*kept, *headers.items()])

    async def complete(
        self, body: dict[str, Any], model: str, headers: Mapping[str, str] | None = None
    ) -> Forwarded:
        payload = json.dumps({**body, "model": model, "stream": False}).encode()
        origin = await self._origins.get()
        try:
            async with origin.post(self.path, self._lines(headers), payload) as answer:
                content = await answer.read()
        except (EgressError, ValueError) as exc:
            raise ProviderUnavailable(self._failure(exc)) from None
        forwarded = Forwarded(answer.status, answer.headers.get("content-type", ""))
        if answer.status == 200:
            forwarded.body = self._without_key(content)
            parsed = forwarded.answer = json_object(forwarded.body)
            forwarded.usage, forwarded.model = self._usage(parsed), _model_of(parsed)
            forwarded.usage_final = isinstance(parsed.get("usage"), dict)
            forwarded.content_chars = content_chars(content)
        else:
            forwarded.body = self._scrubbed(content)
            forwarded.answer = json_object(forwarded.body)
        return forwarded

    async def stream(
        self,
        body: dict[str, Any],
        model: str,
        tally: Forwarded,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[bytes]:
        """The provider's stream, a few events at a time; `tally` gets its status first and
        its usage once counted. A non-200 answer comes as one (scrubbed) body, which `tally`
        keeps too (`body`, `answer`)."""
        payload = json.dumps({**self._streamed(body), "model": model}).encode()
        origin = await self._origins.get()
        async with contextlib.AsyncExitStack() as stack:
            try:
                posting = origin.post(self.path, self._lines(headers), payload)
                answer = await stack.enter_async_context(posting)
            except (EgressError, ValueError) as exc:
                raise ProviderUnavailable(self._failure(exc)) from None
            tally.status = answer.status
            tally.content_type = answer.headers.get("content-type", "")
            try:
                if answer.status != 200:
                    tally.body = self._scrubbed(await answer.read())
                    tally.answer = json_object(tally.body)
                    yield tally.body
                    return
                pending = b""
                async for piece in answer.chunks():
                    pending += self._without_key(piece.replace(b"\r\n", b"\n"))
                    *events, pending = pending.split(b"\n\n")
                    out = b"".join(e + b"\n\n" for e in events if self._event(e, tally, body))
                    if out:
                        tally.content_chars += content_chars(out)
                        yield out
                if pending.strip():
                    tally.content_chars += content_chars(pending)
                    yield pending
            except EgressError:
                return  # the provider went away mid-stream: the caller's stream ends there


def json_object(content: bytes) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _data(event: bytes) -> dict[str, Any] | None:
    """The JSON of an SSE event's `data:` line, if it has one."""
    for line in event.split(b"\n"):
        if line.startswith(b"data: {"):
            try:
                value = json.loads(line[6:])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _model_of(answer: dict[str, Any]) -> str:
    """The model an answer (a completion, a message, or a stream's chunk) says it is from."""
    model = answer.get("model")
    return model[:200] if isinstance(model, str) else ""


def token_count(value: Any) -> int:
    """A token count as a provider sent it, or 0 when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def chat_usage(raw: dict[str, Any]) -> Usage:
    """A Chat Completions `usage` object as the platform counts it (cached input apart)."""
    details = raw.get("prompt_tokens_details")
    cached = (details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    prompt, completion = (
        token_count(raw.get("prompt_tokens")),
        token_count(raw.get("completion_tokens")),
    )
    cached = min(token_count(cached), prompt)
    return Usage(input_tokens=prompt - cached, output_tokens=completion, cache_read_tokens=cached)


class ChatPassthrough(_Passthrough):
    """Chat Completions to an OpenAI-compatible service (Bearer key)."""

    path = "/chat/completions"

    def _auth(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def _usage(self, answer: dict[str, Any]) -> Usage:
        raw = answer.get("usage")
        return chat_usage(raw) if isinstance(raw, dict) else Usage()

    def _streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        options = body.get("stream_options")
        options = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return {**body, "stream": True, "stream_options": options}

    def _event(self, event: bytes, tally: Forwarded, body: dict[str, Any]) -> bool:
        if b'"usage"' not in event:
            return True
        data = _data(event)
        if data is not None and isinstance(data.get("usage"), dict):
            tally.usage = self._usage(data)
            tally.model = _model_of(data) or tally.model
            tally.usage_final = True
        options = body.get("stream_options")
        wanted = isinstance(options, dict) and options.get("include_usage") is True
        return wanted or not _USAGE_ONLY.search(event)


class MessagesPassthrough(_Passthrough):
    """Messages to Anthropic (`x-api-key`; the caller's `anthropic-version` is passed on)."""

    path = "/v1/messages"

    def _auth(self, api_key: str | None) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": "2023-06-01"} if api_key else {}

    def _usage(self, answer: dict[str, Any]) -> Usage:
        raw = answer.get("usage")
        if not isinstance(raw, dict):
            return Usage()
        return Usage(
            input_tokens=token_count(raw.get("input_tokens")),
            output_tokens=token_count(raw.get("output_tokens")),
            cache_read_tokens=token_count(raw.get("cache_read_input_tokens")),
            cache_write_tokens=token_count(raw.get("cache_creation_input_tokens")),
        )

    def _event(self, event: bytes, tally: Forwarded, body: dict[str, Any]) -> bool:
        if b'"usage"' in event:
            data = _data(event)
            if data is not None:
                message = data.get("message")
                if isinstance(message, dict):  # message_start: the model, the input tokens
                    tally.model = _model_of(message) or tally.model
                usage = (data.get("message") or {}).get("usage") or data.get("usage")
                if isinstance(usage, dict):  # message_start has input, message_delta output
                    tally.usage_final |= data.get("type") == "message_delta"
                    found = self._usage({"usage": usage})
                    tally.usage = Usage(
                        input_tokens=found.input_tokens or tally.usage.input_tokens,
                        output_tokens=found.output_tokens or tally.usage.output_tokens,
                        cache_read_tokens=found.cache_read_tokens or tally.usage.cache_read_tokens,
                        cache_write_tokens=found.cache_write_tokens
                        or tally.usage.cache_write_tokens,
                    )
        return True
