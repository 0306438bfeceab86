"""A local HTTP server that speaks the Anthropic and OpenAI wire formats.

Tests and benchmarks point the REAL `anthropic` / `openai` SDK clients at it over loopback HTTP:

    server = ProviderServer()
    server.script("anthropic", TextReply("hello"), ToolCallReply([ToolCall("t1", "f", "{}")]))
    client = anthropic.AsyncAnthropic(api_key="k", base_url=server.anthropic_base_url,
                                      http_client=httpx2.AsyncClient(), max_retries=0)
    ...
    server.close()

Endpoints:
- `POST /v1/messages` (Anthropic Messages, JSON or SSE with `"stream": true`),
  `POST /v1/messages/count_tokens` (a rough estimate).
- `POST /v1/chat/completions` (OpenAI Chat Completions, JSON or SSE with `"stream": true`).
- `POST /v1/embeddings` (OpenAI; deterministic vectors, `float` or `base64`).
- `GET /v1/models` and `GET /v1/models/{id}`: the Anthropic shape when the request carries an
  `anthropic-version` header (the Anthropic SDK always sends one), else the OpenAI shape.

Scripted replies are popped one per chat/messages request (`script`); when a queue is empty a
`TextReply("ok")` is served. Every request is recorded in `received`.

Wire details worth knowing:
- Token counts are put on the wire exactly as given: Anthropic `input_tokens` /
  `cache_read_input_tokens`, OpenAI `prompt_tokens` / `prompt_tokens_details.cached_tokens`
  (OpenAI's `prompt_tokens` includes the cached ones, Anthropic's `input_tokens` does not, so
  set the numbers the way the provider under test would report them).
- The response `model` is the request's model plus `MODEL_SUFFIX` (see `resolved_model`),
  except for embeddings, which echo the model unchanged as OpenAI does.
- `ToolCall.arguments` is raw model output. Streams send it verbatim in 2-3 pieces (Anthropic
  `input_json_delta.partial_json`, OpenAI `function.arguments`). A non-streaming Anthropic reply
  needs an object for `input`: arguments that are not a JSON object are sent as
  `{"INVALID_JSON": "<raw text>"}`, and empty arguments as `{}`.
- `expect_api_key` checks OpenAI's `Authorization: Bearer`, and Anthropic's `x-api-key` or
  `Authorization: Bearer` (the anthropic 2.x SDK sends its `api_key` as a Bearer token).
- Errors use each provider's documented body and the status and headers of the `ErrorReply`;
  for a streaming request the error comes back before any stream starts, as the APIs do.
- Non-streaming responses carry Content-Length; streams use chunked transfer encoding on the
  same keep-alive connection, one HTTP chunk per SSE event, written as soon as it is ready.
- A stream's usage comes last; `TextReply.usage_delay_s` holds it back (a caller that stops
  reading at the finish reason has the whole answer by then), and `TextReply(usage=False)`
  leaves it out of an OpenAI answer altogether (a stream's usage chunk, a completion's
  `usage`), as services that ignore `stream_options.include_usage` do.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = [
    "DEFAULT_EMBEDDING_DIMENSIONS",
    "MODEL_SUFFIX",
    "ErrorReply",
    "ProviderServer",
    "Received",
    "TextReply",
    "ToolCall",
    "ToolCallReply",
    "embedding_for",
    "resolved_model",
]

MODEL_SUFFIX = "-20250101"
DEFAULT_EMBEDDING_DIMENSIONS = 8

_DATED_MODEL = re.compile(r"-\d{8}$")
_MODEL_CREATED = 1735689600  # 2025-01-01T00:00:00Z
_JSON = {"separators": (",", ":"), "ensure_ascii": False}


# --------------------------------------------------------------------------- public data types


@dataclass
class TextReply:
    text: str
    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_tokens: int = 0
    stop_reason: str = "end"  # "end" -> end_turn/stop, "max_tokens" -> max_tokens/length
    delay_s: float = 0.0  # sleep before the response starts (for timeouts)
    chunk_delay_s: float = 0.0  # sleep between stream events (for time-to-first-token checks)
    # A stream's usage comes last: this long after the rest (OpenAI: before the usage chunk;
    # Anthropic: before message_delta, which carries the stop reason and the output count).
    usage_delay_s: float = 0.0
    usage: bool = True  # False (OpenAI only): none at all, even when asked, as some services


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it (may be malformed on purpose)


@dataclass
class ToolCallReply:
    calls: list[ToolCall]
    text: str = ""  # optional text before the calls
    input_tokens: int = 10
    output_tokens: int = 5
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0


@dataclass
class ErrorReply:
    status: int
    message: str = "error"
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"retry-after": "0.1"}
    delay_s: float = 0.0


@dataclass
class Received:
    api: str  # "anthropic" | "openai"
    method: str
    path: str
    headers: dict[str, str]  # lower-cased
    body: Any  # parsed JSON or None


Reply = TextReply | ToolCallReply | ErrorReply


@dataclass
class _Pause:
    """In a stream's events: wait this long before the next one."""

    seconds: float


def resolved_model(model: str) -> str:
    """The model id the server reports for a requested `model` ("x" -> "x-20250101")."""
    return model if _DATED_MODEL.search(model) else model + MODEL_SUFFIX


def embedding_for(text: str, dimensions: int = DEFAULT_EMBEDDING_DIMENSIONS) -> list[float]:
    """The unit-length vector the server returns for `text` (float32-exact values).

    Token-array inputs are keyed by their JSON text, e.g. `embedding_for("[1,2,3]")`.
    """
    raw = b"".join(
        hashlib.sha256(b"%d:%s" % (block, text.encode())).digest()
        for block in range(math.ceil(dimensions / 8))
    )
    values = [x / 2**31 - 1.0 for x in struct.unpack(f"<{dimensions}I", raw[: 4 * dimensions])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    packed = struct.pack(f"<{dimensions}f", *(v / norm for v in values))
    return list(struct.unpack(f"<{dimensions}f", packed))


# --------------------------------------------------------------------------- wire-format helpers


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, **_JSON).encode()


def _pieces(text: str) -> list[str]:
    """`text` split in 2-3 pieces (1 when it is a single character, none when empty)."""
    if not text:
        return []
    count = min(3, len(text))
    size = -(-len(text) // count)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _anthropic_stop_reason(stop_reason: str) -> str:
    return {"end": "end_turn", "max_tokens": "max_tokens"}.get(stop_reason, stop_reason)


def _openai_finish_reason(stop_reason: str) -> str:
    return {"end": "stop", "max_tokens": "length", "end_turn": "stop"}.get(stop_reason, stop_reason)


def _tool_input(arguments: str) -> dict[str, Any]:
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"INVALID_JSON": arguments}
    return value if isinstance(value, dict) else {"INVALID_JSON": arguments}


def _anthropic_error_type(status: int) -> str:
    known = {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        504: "timeout_error",
        529: "overloaded_error",
    }
    return known.get(status, "api_error" if status >= 500 else "invalid_request_error")


def _openai_error_type_and_code(status: int) -> tuple[str, str | None]:
    known: dict[int, tuple[str, str | None]] = {
        401: ("invalid_request_error", "invalid_api_key"),
        403: ("invalid_request_error", "unsupported_country_region_territory"),
        404: ("invalid_request_error", None),
        429: ("requests", "rate_limit_exceeded"),
    }
    if status in known:
        return known[status]
    return ("server_error", None) if status >= 500 else ("invalid_request_error", None)


def _reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return {529: "Overloaded"}.get(status, "Unknown")


def _new_id(prefix: str, length: int = 24) -> str:
    return prefix + uuid.uuid4().hex[:length]


class _BadRequest(Exception):
    pass


# --------------------------------------------------------------------------- the server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # hundreds of clients connect at once in the concurrency bench
    owner: ProviderServer

    def server_bind(self) -> None:
        # HTTPServer.server_bind would call socket.getfqdn(), a reverse DNS lookup.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError) or self.owner._closed.is_set():
            return
        if error is not None:
            self.owner.errors.append(error)
        traceback.print_exc()


class ProviderServer:
    """Anthropic + OpenAI on `127.0.0.1:<free port>`, served from a daemon thread."""

    def __init__(
        self,
        models: list[str] | None = None,
        embedding_dimensions: int = DEFAULT_EMBEDDING_DIMENSIONS,
        *,
        latency_s: float = 0.0,
    ) -> None:
        self.received: list[Received] = []
        # Every chat answer takes at least this long (a real model's latency), and how many
        # were being answered at once, at most (what the concurrency tests look at).
        self.latency_s = latency_s
        self.in_flight = 0
        self.max_in_flight = 0
        self.models: list[str] = list(models) if models else ["claude-test-1", "gpt-test-1"]
        self.serve_models_list = True  # False: GET /v1/models is a 404, as on some servers
        self.embedding_dimensions = embedding_dimensions
        # Unexpected exceptions inside the server (not client disconnects), for assertions.
        self.errors: list[BaseException] = []
        # TCP connections accepted so far (keep-alive reuse shows as a small number).
        self.connection_count = 0
        self._queues: dict[str, deque[Reply]] = {
            "anthropic": deque(),
            "openai": deque(),
            "embeddings": deque(),
        }
        self._lock = threading.Lock()
        self._api_key: str | None = None
        self._closed = threading.Event()
        self._connections: set[socket.socket] = set()

        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler, bind_and_activate=True)
        self._httpd.owner = self
        host, port = self._httpd.server_address[:2]
        self._address = (str(host), int(port))
        self.url = f"http://127.0.0.1:{port}"
        self.anthropic_base_url = self.url
        self.openai_base_url = self.url + "/v1"
        self._thread = threading.Thread(
            target=self._serve, name=f"provider-server-{port}", daemon=True
        )
        self._thread.start()

    # -- public API

    def script(self, api: str, *replies: Reply) -> None:
        """Queue replies for "anthropic" or "openai" chat/messages requests; each request pops
        the next; when the queue is empty a default TextReply("ok") is served.

        `script("embeddings", ErrorReply(...))` likewise makes the next embeddings requests
        fail; an empty embeddings queue means a normal response.
        """
        if api not in self._queues:
            raise ValueError(f"unknown api {api!r}; expected 'anthropic', 'openai' or 'embeddings'")
        allowed = (ErrorReply,) if api == "embeddings" else (TextReply, ToolCallReply, ErrorReply)
        for reply in replies:
            if not isinstance(reply, allowed):
                raise TypeError(f"cannot script {type(reply).__name__} for {api!r}")
        with self._lock:
            self._queues[api].extend(replies)

    def pending(self, api: str) -> int:
        """How many scripted replies for `api` have not been served yet."""
        with self._lock:
            return len(self._queues[api])

    def expect_api_key(self, key: str | None) -> None:
        """When set, requests without that key (x-api-key for Anthropic, Authorization: Bearer for
        OpenAI) get a 401 in the provider's error format.

        Anthropic requests may carry the key as `Authorization: Bearer` too: the anthropic 2.x
        SDK sends `api_key` that way, not as `x-api-key`.
        """
        self._api_key = key

    def requests_to(self, path: str) -> list[Received]:
        """The recorded requests whose path is `path` (e.g. "/v1/messages")."""
        return [r for r in self.received if r.path == path]

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        # Wake the blocking accept() so the serving thread sees the flag and exits.
        with contextlib.suppress(OSError):
            socket.create_connection(self._address, timeout=1).close()
        self._thread.join(timeout=5)
        self._httpd.server_close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> ProviderServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals

    def _serve(self) -> None:
        httpd = self._httpd
        while True:
            try:
                conn, addr = httpd.socket.accept()
            except OSError:
                return
            if self._closed.is_set():
                conn.close()
                return
            self.connection_count += 1
            try:
                httpd.process_request(conn, addr)
            except Exception:
                httpd.handle_error(conn, addr)
                httpd.shutdown_request(conn)

    def _next_reply(self, api: str) -> Reply | None:
        with self._lock:
            queue = self._queues[api]
            if queue:
                return queue.popleft()
        return None if api == "embeddings" else TextReply("ok")

    def _wait(self, seconds: float) -> bool:
        """Sleep `seconds`; False when the server was closed meanwhile."""
        if seconds > 0:
            return not self._closed.wait(seconds)
        return not self._closed.is_set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer
    _api = "openai"  # which provider's formats this request gets; set per request

    # -- plumbing

    def setup(self) -> None:
        super().setup()
        self.server.owner._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)

    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_reason_phrase(status)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _request_id_header(self) -> dict[str, str]:
        if self._api == "anthropic":
            return {"request-id": _new_id("req_")}
        return {"x-request-id": _new_id("req_", 32)}

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = _dumps(obj)
        head = {
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            **self._request_id_header(),
            **(headers or {}),
        }
        self._write(self._head(status, head) + body)

    def _send_stream(self, events: list[bytes | _Pause], chunk_delay_s: float) -> None:
        head = {
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
            **self._request_id_header(),
        }
        self._write(self._head(200, head))
        owner = self.server.owner
        pause = 0.0
        for i, event in enumerate(events):
            if isinstance(event, _Pause):
                pause += event.seconds
                continue
            if i and (pause or chunk_delay_s) and not owner._wait(pause or chunk_delay_s):
                self.close_connection = True
                return
            pause = 0.0
            chunk = b"%x\r\n%b\r\n" % (len(event), event)
            if i == len(events) - 1:
                chunk += b"0\r\n\r\n"
            self._write(chunk)

    def _send_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        if self._api == "anthropic":
            body: dict[str, Any] = {
                "type": "error",
                "error": {"type": _anthropic_error_type(status), "message": message},
                "request_id": _new_id("req_"),
            }
        else:
            error_type, code = _openai_error_type_and_code(status)
            body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        self._send_json(status, body, headers)

    # -- routing

    def _dispatch(self) -> None:
        owner = self.server.owner
        path = unquote(urlsplit(self.path).path)
        if len(path) > 1:
            path = path.rstrip("/")
        headers = {name.lower(): value for name, value in self.headers.items()}
        if path.startswith("/v1/messages"):
            self._api = "anthropic"
        elif path.startswith(("/v1/chat/", "/v1/embeddings")):
            self._api = "openai"
        else:
            self._api = "anthropic" if "anthropic-version" in headers else "openai"
        try:
            raw = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        owner.received.append(Received(self._api, self.command, path, headers, body))

        try:
            if owner._closed.is_set():
                self.close_connection = True
                return
            if not self._authorized(headers):
                self._send_unauthorized()
            elif bad_json:
                self._send_error(400, "The request body is not valid JSON.")
            else:
                self._route(path, body)
        except ConnectionError:
            self.close_connection = True
        except _BadRequest as error:
            self._send_error(400, str(error))
        except Exception as error:
            owner.errors.append(error)
            traceback.print_exc()
            with contextlib.suppress(OSError):
                self._send_error(500, f"fake provider server error: {error!r}")

    def _authorized(self, headers: dict[str, str]) -> bool:
        key = self.server.owner._api_key
        if key is None:
            return True
        bearer = headers.get("authorization") == f"Bearer {key}"
        if self._api == "anthropic":
            return headers.get("x-api-key") == key or bearer
        return bearer

    def _send_unauthorized(self) -> None:
        if self._api == "anthropic":
            self._send_error(401, "invalid x-api-key")
        else:
            self._send_error(
                401,
                "Incorrect API key provided. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
            )

    def _route(self, path: str, body: Any) -> None:
        method = self.command
        if method == "POST" and path == "/v1/messages":
            self._anthropic_messages(body)
        elif method == "POST" and path == "/v1/messages/count_tokens":
            self._anthropic_count_tokens(body)
        elif method == "POST" and path == "/v1/chat/completions":
            self._openai_chat(body)
        elif method == "POST" and path == "/v1/embeddings":
            self._openai_embeddings(body)
        elif method == "GET" and path == "/v1/models" and self.server.owner.serve_models_list:
            self._models_list()
        elif method == "GET" and path.startswith("/v1/models/"):
            self._models_retrieve(path.removeprefix("/v1/models/"))
        else:
            self._send_error(404, f"Unknown request URL: {method} {path}")

    def _take_reply(self, api: str) -> Reply | None:
        owner = self.server.owner
        reply = owner._next_reply(api)
        delay = (reply.delay_s if reply is not None else 0.0) + (
            owner.latency_s if api != "embeddings" else 0.0
        )
        if delay:
            with owner._lock:
                owner.in_flight += 1
                owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
            try:
                waited = owner._wait(delay)
            finally:
                with owner._lock:
                    owner.in_flight -= 1
            if not waited:
                self.close_connection = True
                raise ConnectionAbortedError("server closed")
        return reply

    @staticmethod
    def _require(body: Any, *names: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _BadRequest("The request body must be a JSON object.")
        for name in names:
            if name not in body:
                raise _BadRequest(f"{name}: Field required")
        return body

    # -- Anthropic

    def _anthropic_messages(self, body: Any) -> None:
        request = self._require(body, "model", "max_tokens", "messages")
        reply = self._take_reply("anthropic")
        model = resolved_model(str(request["model"]))
        if isinstance(reply, ErrorReply):
            self._send_error(reply.status, reply.message, reply.headers)
        elif request.get("stream"):
            assert isinstance(reply, TextReply | ToolCallReply)
            self._send_stream(list(_anthropic_events(reply, model)), reply.chunk_delay_s)
        else:
            assert isinstance(reply, TextReply | ToolCallReply)
            self._send_json(200, _anthropic_message(reply, model))

    def _anthropic_count_tokens(self, body: Any) -> None:
        request = self._require(body, "model", "messages")
        counted = {k: request.get(k) for k in ("system", "messages", "tools")}
        self._send_json(200, {"input_tokens": max(1, len(_dumps(counted)) // 4)})

    # -- OpenAI

    def _openai_chat(self, body: Any) -> None:
        request = self._require(body, "model", "messages")
        reply = self._take_reply("openai")
        model = resolved_model(str(request["model"]))
        if isinstance(reply, ErrorReply):
            self._send_error(reply.status, reply.message, reply.headers)
        elif request.get("stream"):
            assert isinstance(reply, TextReply | ToolCallReply)
            options = request.get("stream_options") or {}
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            include_usage = include_usage and getattr(reply, "usage", True)
            events = list(_openai_chunks(reply, model, include_usage=include_usage))
            self._send_stream(events, reply.chunk_delay_s)
        else:
            assert isinstance(reply, TextReply | ToolCallReply)
            self._send_json(200, _openai_completion(reply, model))

    def _openai_embeddings(self, body: Any) -> None:
        owner = self.server.owner
        request = self._require(body, "model", "input")
        dimensions = request.get("dimensions", owner.embedding_dimensions)
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise _BadRequest(f"Invalid value for 'dimensions': {dimensions!r}.")
        encoding = request.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise _BadRequest(f"Invalid value for 'encoding_format': {encoding!r}.")
        keys, tokens = _embedding_inputs(request["input"])
        reply = self._take_reply("embeddings")
        if isinstance(reply, ErrorReply):
            self._send_error(reply.status, reply.message, reply.headers)
            return
        data = []
        for index, key in enumerate(keys):
            vector = embedding_for(key, dimensions)
            embedding: list[float] | str = vector
            if encoding == "base64":
                packed = struct.pack(f"<{len(vector)}f", *vector)
                embedding = base64.b64encode(packed).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(request["model"]),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # -- models

    def _model_info(self, model_id: str) -> dict[str, Any]:
        if self._api == "anthropic":
            return {
                "type": "model",
                "id": model_id,
                "display_name": model_id,
                "created_at": "2025-01-01T00:00:00Z",
                "lifecycle": "active",
            }
        return {
            "id": model_id,
            "object": "model",
            "created": _MODEL_CREATED,
            "owned_by": "fake-provider",
        }

    def _models_list(self) -> None:
        models = list(self.server.owner.models)
        data = [self._model_info(m) for m in models]
        if self._api == "anthropic":
            body: dict[str, Any] = {
                "data": data,
                "has_more": False,
                "first_id": models[0] if models else None,
                "last_id": models[-1] if models else None,
            }
        else:
            body = {"object": "list", "data": data}
        self._send_json(200, body)

    def _models_retrieve(self, model_id: str) -> None:
        if model_id in self.server.owner.models:
            self._send_json(200, self._model_info(model_id))
        else:
            self._send_error(404, f"model: {model_id}")


# --------------------------------------------------------------------------- response builders


def _anthropic_blocks(reply: TextReply | ToolCallReply) -> list[str | ToolCall]:
    """The reply's content blocks in order: text (a str) or tool use (a ToolCall)."""
    if isinstance(reply, TextReply):
        return [reply.text]
    return ([reply.text] if reply.text else []) + list(reply.calls)


def _anthropic_usage(reply: TextReply | ToolCallReply, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": getattr(reply, "cache_read_tokens", 0),
        "output_tokens": output_tokens,
    }


def _anthropic_stop(reply: TextReply | ToolCallReply) -> str:
    if isinstance(reply, ToolCallReply):
        return "tool_use"
    return _anthropic_stop_reason(reply.stop_reason)


def _anthropic_message(reply: TextReply | ToolCallReply, model: str) -> dict[str, Any]:
    content = [
        {"type": "text", "text": block}
        if isinstance(block, str)
        else {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": _tool_input(block.arguments),
        }
        for block in _anthropic_blocks(reply)
    ]
    return {
        "id": _new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, reply.output_tokens),
    }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (event.encode(), _dumps({"type": event, **data}))


def _anthropic_events(reply: TextReply | ToolCallReply, model: str) -> Iterator[bytes | _Pause]:
    message = {
        "id": _new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, 1),
    }
    yield _sse("message_start", {"message": message})
    for index, block in enumerate(_anthropic_blocks(reply)):
        start: dict[str, Any]
        if isinstance(block, str):
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block)]
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            pieces = _pieces(block.arguments) or [""]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        yield _sse("content_block_start", {"index": index, "content_block": start})
        if index == 0:
            yield _sse("ping", {})
        for delta in deltas:
            yield _sse("content_block_delta", {"index": index, "delta": delta})
        yield _sse("content_block_stop", {"index": index})
    if getattr(reply, "usage_delay_s", 0):
        yield _Pause(reply.usage_delay_s)
    yield _sse(
        "message_delta",
        {
            "delta": {"stop_reason": _anthropic_stop(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        },
    )
    yield _sse("message_stop", {})


def _openai_usage(reply: TextReply | ToolCallReply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": getattr(reply, "cache_read_tokens", 0),
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _openai_finish(reply: TextReply | ToolCallReply) -> str:
    if isinstance(reply, ToolCallReply):
        return "tool_calls"
    return _openai_finish_reason(reply.stop_reason)


def _openai_completion(reply: TextReply | ToolCallReply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "refusal": None, "annotations": []}
    if isinstance(reply, TextReply):
        message["content"] = reply.text
    else:
        message["content"] = reply.text or None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.calls
        ]
    return {
        "id": _new_id("chatcmpl-", 29),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _openai_finish(reply),
            }
        ],
        **({"usage": _openai_usage(reply)} if getattr(reply, "usage", True) else {}),
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _openai_chunks(
    reply: TextReply | ToolCallReply, model: str, *, include_usage: bool
) -> Iterator[bytes | _Pause]:
    base: dict[str, Any] = {
        "id": _new_id("chatcmpl-", 29),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        data = {**base, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return b"data: %b\n\n" % _dumps(data)

    text_only = isinstance(reply, TextReply)
    yield chunk(
        {"role": "assistant", "content": "" if text_only or reply.text else None, "refusal": None}
    )
    for piece in _pieces(reply.text):
        yield chunk({"content": piece})
    for index, call in enumerate([] if isinstance(reply, TextReply) else reply.calls):
        start = {"name": call.name, "arguments": ""}
        yield chunk(
            {"tool_calls": [{"index": index, "id": call.id, "type": "function", "function": start}]}
        )
        for piece in _pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _openai_finish(reply))
    if include_usage:
        if getattr(reply, "usage_delay_s", 0):
            yield _Pause(reply.usage_delay_s)
        yield b"data: %b\n\n" % _dumps({**base, "choices": [], "usage": _openai_usage(reply)})
    yield b"data: [DONE]\n\n"


def _embedding_inputs(value: Any) -> tuple[list[str], int]:
    """Input keys (texts, or token arrays as JSON) and a rough prompt-token count."""

    def is_tokens(item: Any) -> bool:
        return isinstance(item, list) and bool(item) and all(type(t) is int for t in item)

    if isinstance(value, str) or is_tokens(value):
        items = [value]
    elif isinstance(value, list) and value:
        items = value
    else:
        raise _BadRequest("'input' must be a non-empty string, array of strings or tokens.")
    keys: list[str] = []
    tokens = 0
    for item in items:
        if isinstance(item, str) and item:
            keys.append(item)
            tokens += max(1, (len(item) + 3) // 4)
        elif is_tokens(item):
            keys.append(json.dumps(item, separators=(",", ":")))
            tokens += len(item)
        else:
            raise _BadRequest("'input' items must be non-empty strings or token arrays.")
    return keys, tokens
