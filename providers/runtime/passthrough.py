"""A caller's Chat Completions request sent on to an OpenAI-compatible provider as it came.

The gateway's path (`/v1` with a `<connection>/<model>` model): no agent, no translation.
Only `model` is replaced, and for a stream `stream_options.include_usage` is asked for so
the call's tokens are known (the usage chunk is passed on only when the caller asked for
it too). What the provider answers goes back byte for byte, errors included (with the
connection's key scrubbed). Going through the SDK instead would cost about 1 ms of CPU
per call in building and parsing pydantic objects the caller never sees (bench/api.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from providers.runtime.clients import PerLoop
from providers.runtime.errors import ProviderUnavailable
from providers.runtime.sdk_errors import redact
from providers.runtime.types import Usage
from tools.runtime.egress import EgressError

_USAGE_ONLY = re.compile(rb'"choices"\s*:\s*\[\s*\]')


@dataclass
class Forwarded:
    """What the provider answered: its status, content type and body, and the usage. A
    stream fills in `status` and `usage` as it goes."""

    status: int = 0
    content_type: str = ""
    body: bytes = b""
    usage: Usage = field(default_factory=Usage)


class ChatPassthrough:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        http_client: Callable[..., httpx2.AsyncClient] | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._headers = {"content-type": "application/json", **dict(headers or {})}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._clients = PerLoop(
            lambda: (http_client or httpx2.AsyncClient)(timeout=timeout_s),
            close=lambda client: client.aclose(),
        )

    def __repr__(self) -> str:  # never the key
        return f"ChatPassthrough({self.url!r})"

    def _scrubbed(self, body: bytes) -> bytes:
        return redact(body.decode("utf-8", "replace"), self._api_key).encode()

    async def complete(self, body: dict[str, Any], model: str) -> Forwarded:
        client = await self._clients.get()
        payload = json.dumps({**body, "model": model, "stream": False}).encode()
        try:
            response = await client.post(self.url, content=payload, headers=self._headers)
        except (httpx2.HTTPError, EgressError) as exc:
            raise ProviderUnavailable(self._failure(exc)) from None
        content = response.content
        usage = Usage()
        if response.status_code == 200:
            usage = _usage(json.loads(content).get("usage"))
        else:
            content = self._scrubbed(content)
        return Forwarded(
            response.status_code, response.headers.get("content-type", ""), content, usage
        )

    async def stream(
        self, body: dict[str, Any], model: str, tally: Forwarded
    ) -> AsyncIterator[bytes]:
        """The provider's stream, a few events at a time; `tally` gets its status first and
        its usage once counted. A non-200 answer comes as one (scrubbed) body."""
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        options = {**(body.get("stream_options") or {}), "include_usage": True}
        payload = json.dumps(
            {**body, "model": model, "stream": True, "stream_options": options}
        ).encode()
        client = await self._clients.get()
        request = client.build_request("POST", self.url, content=payload, headers=self._headers)
        try:
            response = await client.send(request, stream=True)
        except (httpx2.HTTPError, EgressError) as exc:
            raise ProviderUnavailable(self._failure(exc)) from None
        try:
            tally.status = response.status_code
            tally.content_type = response.headers.get("content-type", "")
            if response.status_code != 200:
                yield self._scrubbed(await response.aread())
                return
            pending = b""
            async for piece in response.aiter_bytes():
                pending += piece
                *events, pending = pending.split(b"\n\n")
                out = []
                for event in events:
                    if b'"usage"' in event and event.startswith(b"data: {"):
                        counted = json.loads(event[6:]).get("usage")
                        if counted:
                            tally.usage = _usage(counted)
                        if not wants_usage and _USAGE_ONLY.search(event):
                            continue
                    out.append(event + b"\n\n")
                if out:
                    yield b"".join(out)
            if pending.strip():
                yield pending
        finally:
            await response.aclose()

    def _failure(self, exc: Exception) -> str:
        return redact(f"the provider could not be reached ({type(exc).__name__})", self._api_key)


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0 if isinstance(details, dict) else 0
    return Usage(
        input_tokens=(raw.get("prompt_tokens") or 0) - cached,
        output_tokens=raw.get("completion_tokens") or 0,
        cache_read_tokens=cached,
    )
