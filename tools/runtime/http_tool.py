"""HTTP tools declared in configuration: an existing REST call described, not coded.

The model sees only the tool's input schema. Values from the RunContext (tenant, user,
run ids), fixed values and the credential are added server-side; the credential comes
from the RunContext's secret accessor at call time and is redacted from everything the
registry records. All traffic goes through the guarded egress client.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import random
import re
import time
from collections.abc import Mapping
from functools import partial
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

import httpx2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from tools.runtime.circuit import CircuitBreaker, CircuitOpen, CircuitStore
from tools.runtime.context import RunContext, StaticSecrets
from tools.runtime.egress import (
    EgressConnectError,
    EgressError,
    EgressResponse,
    EgressTimeout,
    GuardedHttpClient,
)
from tools.runtime.frames import KIND_PATTERN, Source
from tools.runtime.prepared_request import MASK, PreparedRequest
from tools.runtime.registry import ToolFailed
from tools.runtime.tool import Capability, Effect, Tool
from tools.runtime.validation import compile_validator

Location = Literal["path", "query", "header", "body"]
RETRY_STATUSES = frozenset({429, 502, 503, 504})
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")  # (a token, RFC 9110)
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "cookie"}
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # a path argument: {name}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # (tab is allowed in header values)
_SELECT_PATH = r"^[A-Za-z0-9_*-]{1,100}(\.[A-Za-z0-9_*-]{1,100}){0,19}$"  # select()'s: a.*.b
Kind = Annotated[str, StringConstraints(pattern=KIND_PATTERN)]
MAX_VIEW_FIELDS = 50  # model_view's fields (as many as `references`)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgumentTarget(_Strict):
    """Where a model-visible argument goes; `name` defaults to the argument's own."""

    argument: str
    to: Location
    name: str | None = None
    # The argument takes a reference token of this kind (`slot#2`), mapped back to the id a
    # result showed as it (tools/runtime/frames.py); a raw value is refused.
    reference: str | None = Field(None, pattern=KIND_PATTERN)


class ContextTarget(_Strict):
    """A server-side value the model never sees (or sets)."""

    value: Literal["tenant_id", "user_id", "run_id", "correlation_id"]
    to: Location
    name: str


class FixedValues(_Strict):
    query: dict[str, str | int | float | bool] = {}
    headers: dict[str, str] = {}
    body: dict[str, Any] = {}


class AuthConfig(_Strict):
    """bearer: `Authorization: Bearer <secret>`; header: `<header>: <secret>`;
    basic: `Authorization: Basic base64(<username>:<secret>)`."""

    type: Literal["bearer", "header", "basic"]
    header: str = "X-API-Key"
    username: str = ""


class RetryConfig(_Strict):
    max_attempts: int = Field(3, ge=1, le=10)
    base_delay_s: float = Field(0.2, ge=0, le=30)
    max_delay_s: float = Field(5.0, ge=0, le=60)


class CircuitConfig(_Strict):
    failure_threshold: int = Field(5, ge=1, le=1000)
    cooldown_s: float = Field(30.0, ge=0.1, le=3600)


class HttpToolConfig(_Strict):
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str
    arguments: list[ArgumentTarget] = []
    fixed: FixedValues = FixedValues()
    context: list[ContextTarget] = []
    auth: AuthConfig | None = None
    timeout_s: float = Field(10.0, gt=0, le=120)
    retry: RetryConfig = RetryConfig()
    circuit: CircuitConfig = CircuitConfig()
    max_response_bytes: int = Field(1_000_000, ge=1, le=20_000_000)
    # What the model sees of a result: {field: path}, "" the whole result. Bounded (and the
    # view's size checked per call, _check_view_size): a path may repeat the whole response.
    model_view: Annotated[dict[str, str], Field(max_length=MAX_VIEW_FIELDS)] | None = None
    # Result paths ("slots.*.id", model_view's syntax) whose values the model sees as
    # reference tokens of a kind ("slot"): server-owned ids it can neither see nor invent.
    references: dict[Annotated[str, StringConstraints(pattern=_SELECT_PATH)], Kind] = Field(
        default_factory=dict, max_length=50
    )

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if PLACEHOLDER.search(parts.netloc):
            raise ValueError("placeholders may appear in the path only, not in the host")
        return url

    @model_validator(mode="after")
    def _consistent(self) -> HttpToolConfig:
        placeholders = set(PLACEHOLDER.findall(urlsplit(self.url).path))
        path_targets = {t.name or t.argument for t in self.arguments if t.to == "path"}
        path_targets |= {t.name for t in self.context if t.to == "path"}
        if missing := placeholders - path_targets:
            raise ValueError(
                f"url placeholders without a path mapping: {', '.join(sorted(missing))}"
            )
        if extra := path_targets - placeholders:
            raise ValueError(f"path mappings without a url placeholder: {', '.join(sorted(extra))}")
        headers = [t.name or t.argument for t in self.arguments if t.to == "header"]
        headers += [t.name for t in self.context if t.to == "header"] + list(self.fixed.headers)
        if self.auth is not None and self.auth.type == "header":
            headers.append(self.auth.header)
        for header in headers:
            if not HEADER_NAME.match(header) or header.lower() in _RESERVED_HEADERS:
                raise ValueError(f"{header!r} cannot be used as a header name")
        return self

    def check_against_schema(self, input_schema: dict) -> None:
        """Mapped arguments must be in the model's schema; server values must not be."""
        properties = set(input_schema.get("properties", {}))
        if unknown := {t.argument for t in self.arguments} - properties:
            raise ValueError(f"mapped arguments not in input_schema: {', '.join(sorted(unknown))}")
        if leaked := {t.name for t in self.context} & properties:
            raise ValueError(
                f"context values must not be model arguments: {', '.join(sorted(leaked))}"
            )


def build_http_tool(
    *,
    name: str,
    description: str,
    input_schema: dict,
    config: HttpToolConfig,
    egress: GuardedHttpClient,
    circuit_store: CircuitStore,
    circuit_key: str,
    secret_ref: str | None = None,
    output_schema: dict | None = None,
    tags: frozenset[str] = frozenset(),
    capability: Capability | None = None,
    depends_on: Mapping[str, Source] | None = None,
) -> Tool:
    config.check_against_schema(input_schema)
    if config.auth is not None and secret_ref is None:
        raise ValueError("auth is configured but the tool has no secret")
    idempotent_method = config.method in ("GET", "PUT", "DELETE")
    capability = capability or Capability(
        effect=Effect.READ if config.method == "GET" else Effect.WRITE,
        idempotent=idempotent_method,
        timeout_s=min(3600, config.timeout_s * config.retry.max_attempts + 5),
    )
    call = _HttpCall(
        config=config,
        egress=egress,
        breaker=CircuitBreaker(
            circuit_key,
            circuit_store,
            failure_threshold=config.circuit.failure_threshold,
            cooldown_s=config.circuit.cooldown_s,
        ),
        secret_ref=secret_ref,
        output_validator=compile_validator(output_schema) if output_schema else None,
        idempotent=capability.idempotent,
        deadline_s=capability.timeout_s,
        known_arguments=set(input_schema.get("properties", {})),
    )
    return Tool(
        name=name,
        description=description,
        input_schema=input_schema,
        handler=call,
        output_schema=output_schema if config.model_view is None else None,
        tags=frozenset(tags) | {"http"},
        capability=capability,
        preparer=call,
        view=None if config.model_view is None else partial(_model_view, config.model_view),
        depends_on=depends_on or {},
        reference_inputs={t.argument: t.reference for t in config.arguments if t.reference},
        references=dict(config.references),
    )


def _model_view(fields: dict[str, str], data: Any) -> Any:
    return {key: select(data, path) for key, path in fields.items()}


def _check_view_size(fields: dict[str, str], data: Any, limit: int) -> None:
    """ToolFailed if the model's view of `data` would be more than `limit` characters of
    JSON: each field may pick the whole response (""), and a view must not multiply it. Its
    fields are measured one by one, stopping at the limit, not the whole view built."""
    size = 0
    for key, path in fields.items():
        size += len(key) + len(json.dumps(select(data, path), ensure_ascii=False, default=str))
        if size > limit:
            raise ToolFailed(
                f"the response's model_view would be over {limit:,} characters, the tool's "
                "max_response_bytes (its fields repeat large parts of the response); an admin "
                "must narrow the tool's model_view"
            )


class _HttpCall:
    """The handler of one HTTP tool, and its preparer: a call is prepared (arguments mapped
    into the exact request) then sent; a call that needs confirming is prepared, shown,
    stored and sent once approved (tools/runtime/prepared_request.py)."""

    def __init__(
        self,
        *,
        config: HttpToolConfig,
        egress: GuardedHttpClient,
        breaker: CircuitBreaker,
        secret_ref: str | None,
        output_validator,
        idempotent: bool,
        deadline_s: float,
        known_arguments: set[str],
    ) -> None:
        self.config = config
        self.egress = egress
        self.breaker = breaker
        self.secret_ref = secret_ref
        self.output_validator = output_validator
        self.idempotent = idempotent
        self.deadline_s = deadline_s
        mapped = {t.argument: t for t in config.arguments}
        self.known = set(known_arguments)
        self.default_location: Location = "query" if config.method in ("GET", "DELETE") else "body"
        self.mapped = mapped
        self._hidden: tuple[tuple[str, ...], StaticSecrets] | None = None

    async def __call__(self, arguments: dict[str, Any], ctx: RunContext) -> Any:
        return await self.send(self.prepare(arguments, ctx), ctx)

    def prepare(self, arguments: dict[str, Any], ctx: RunContext) -> PreparedRequest:
        """The request these arguments map to: pure, no I/O, no credential (its header
        shows MASK). ToolFailed if a value cannot go where it is mapped."""
        config = self.config
        path: dict[str, str] = {}
        params: dict[str, Any] = dict(config.fixed.query)
        headers: dict[str, str] = dict(config.fixed.headers)
        body: dict[str, Any] = dict(config.fixed.body)
        places = {"path": path, "query": params, "header": headers, "body": body}
        fixed = {"path": {}, "query": config.fixed.query, "header": config.fixed.headers,
                 "body": config.fixed.body}  # fmt: skip
        for argument, value in arguments.items():
            if argument not in self.known:  # only what the schema offers the model
                continue
            target = self.mapped.get(argument)
            location = target.to if target else self.default_location
            key = (target.name or argument) if target else argument
            if key not in fixed[location]:  # the model cannot override what the admin set
                places[location][key] = value
        for target in config.context:
            value = getattr(ctx, target.value)
            if value is None:
                raise ToolFailed(f"this tool needs a {target.value}, and the call has none")
            places[target.to][target.name] = value
        for key, value in list(headers.items()):
            headers[key] = _header_value(value)
        for name, value in path.items():
            if str(value) in ("", ".", ".."):
                raise ToolFailed(f"{name!r} cannot be {str(value)!r} in a URL path")
        url = PLACEHOLDER.sub(lambda m: quote(str(path[m.group(1)]), safe=""), config.url)
        # Encoded here as the HTTP client encodes it, so the URL shown is the URL sent.
        url = str(httpx2.URL(url).copy_merge_params(params) if params else httpx2.URL(url))
        credential_header = None
        if config.auth is not None:
            credential_header = _credential_header(config.auth)
            headers[credential_header] = _credential_shown(config.auth)
        if config.method != "GET" and ctx.call_id:
            headers.setdefault("Idempotency-Key", f"{ctx.run_id or 'direct'}:{ctx.call_id}")
        text = None
        if config.method in ("POST", "PUT", "PATCH"):
            text = _json_body(body)
            if not any(name.lower() == "content-type" for name in headers):
                headers["Content-Type"] = "application/json"
        return PreparedRequest(
            method=config.method,
            url=url,
            headers=tuple(headers.items()),
            body=text,
            credential_header=credential_header,
        )

    async def send(self, request: PreparedRequest, ctx: RunContext) -> Any:
        """Send exactly `request`, the credential put in its header. Refused (nothing sent)
        if the tool no longer sends its credential to that origin, in that header: the
        credential only goes where the tool's configuration says now."""
        self._check_destination(request)
        headers = dict(request.headers)
        derived: list[str] = []
        if request.credential_header is not None and self.config.auth is not None:
            secret = ctx.secrets.get(self.secret_ref)
            value = _credential_value(self.config.auth, secret)
            headers[request.credential_header] = value
            if self.config.auth.type == "basic":
                derived.append(basic_token(self.config.auth, secret))
        content = request.body.encode("utf-8") if request.body is not None else None
        # The registry redacts the secret and its encodings (base64 within basic auth's
        # token too); the whole token, username included, is redacted here, should the
        # service echo it.
        hide = self._hide(tuple(derived))
        try:
            return hide.redact(await self._exchange(request.method, request.url, headers, content))
        except ToolFailed as exc:
            raise ToolFailed(hide.redact(str(exc))) from None

    def _hide(self, tokens: tuple[str, ...]) -> StaticSecrets:
        """An accessor masking `tokens`, kept while they stay the same (its forms are
        compiled once, not per call)."""
        hidden = self._hidden
        if hidden is None or hidden[0] != tokens:
            secrets = StaticSecrets({str(i): token for i, token in enumerate(tokens)})
            hidden = self._hidden = (tokens, secrets)
        return hidden[1]

    def _check_destination(self, request: PreparedRequest) -> None:
        changed = _origin(request.url) != _origin(self.config.url)
        auth = self.config.auth
        header = _credential_header(auth) if auth is not None else None
        if (header or "").lower() != (request.credential_header or "").lower():
            changed = True
        if changed:
            raise ToolFailed(
                "the tool's address or authentication changed since this request was "
                "prepared; nothing was sent"
            )

    async def _exchange(self, method, url, headers, content) -> Any:
        try:
            seen = await self.breaker.before_call()
        except CircuitOpen as exc:
            raise ToolFailed(str(exc)) from None
        try:
            response = await self._send_with_retries(method, url, headers, content)
        except (EgressTimeout, EgressConnectError) as exc:
            await self.breaker.on_failure()
            raise ToolFailed(str(exc)) from None
        except EgressError as exc:  # refused destination, too large: not the server's health
            await self.breaker.on_success(seen)
            raise ToolFailed(str(exc)) from None
        if response.status_code >= 500 or response.status_code == 429:
            await self.breaker.on_failure()
        else:
            await self.breaker.on_success(seen)
        return self._read(method, response)

    async def _send_with_retries(self, method, url, headers, content) -> EgressResponse:
        retry = self.config.retry
        deadline = time.monotonic() + self.deadline_s - 0.5
        attempt = 0
        response: EgressResponse | None = None
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                response = await self.egress.request(
                    method,
                    url,
                    headers=headers,
                    content=content,
                    timeout_s=max(0.1, min(self.config.timeout_s, remaining)),
                    max_bytes=self.config.max_response_bytes,
                    # A write goes once, to the URL prepared (and confirmed): a redirect
                    # that would resend its body elsewhere is answered as an error.
                    follow_redirects=method == "GET",
                )
            except (EgressTimeout, EgressConnectError):
                # A timeout may have reached the server: retry only idempotent calls.
                if attempt >= retry.max_attempts or not self.idempotent:
                    raise
                response = None
                delay = _backoff(retry, attempt)
            else:
                if response.status_code not in RETRY_STATUSES or attempt >= retry.max_attempts:
                    return response
                if not (self.idempotent or response.status_code == 429):
                    return response
                delay = _retry_after(response) or _backoff(retry, attempt)
                delay = min(delay, retry.max_delay_s)
            if time.monotonic() + delay >= deadline:  # no time left for another attempt
                if response is not None:
                    return response
                raise EgressTimeout(f"gave up after {attempt} attempts")
            await asyncio.sleep(delay)

    def _read(self, method: str, response: EgressResponse) -> Any:
        status = response.status_code
        if not 200 <= status < 300:
            snippet = response.text[:300].strip()
            where = urlsplit(response.url)
            raise ToolFailed(
                f"HTTP {status} from {method} {where.netloc}{where.path}"
                + (f": {snippet}" if snippet else "")
            )
        content_type = response.headers.get("content-type", "")
        if not response.content:
            data: Any = None
        elif "json" in content_type:
            try:
                data = json.loads(response.content)
            except ValueError:
                raise ToolFailed("the service answered with invalid JSON") from None
        else:
            data = response.text
        if self.output_validator is not None:
            problem = self.output_validator(data)
            if problem is not None:
                raise ToolFailed(f"the response did not match output_schema: {problem}")
        if self.config.model_view is not None:
            _check_view_size(self.config.model_view, data, self.config.max_response_bytes)
        return data  # the model sees the tool's view of it (model_view), the frame all of it


def _header_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if "\r" in text or "\n" in text:
        raise ToolFailed("header values cannot contain line breaks")
    if _CONTROL.search(text):
        raise ToolFailed("header values cannot contain control characters")
    return text


def _json_body(body: dict[str, Any]) -> str:
    """The body's exact text, as the HTTP client would encode it."""
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")
    except ValueError:  # NaN / Infinity, or text with an unpaired surrogate
        raise ToolFailed("the request body cannot carry these values as JSON") from None
    return text


def _credential_header(auth: AuthConfig) -> str:
    return auth.header if auth.type == "header" else "Authorization"


def _credential_value(auth: AuthConfig, secret: str) -> str:
    if auth.type == "bearer":
        return f"Bearer {secret}"
    if auth.type == "header":
        return secret
    return f"Basic {basic_token(auth, secret)}"


def basic_token(auth: AuthConfig, secret: str) -> str:
    """Basic auth's base64 token of `username:secret`: it holds the secret whole, so it is
    masked beside it wherever an answer may echo it (the secret's own masked forms cover it
    only from MIN_DERIVED_CHARS characters: tools/runtime/secret_forms.py)."""
    return base64.b64encode(f"{auth.username}:{secret}".encode()).decode()


def _credential_shown(auth: AuthConfig) -> str:
    """The credential header's value as a prepared request shows it: its scheme, MASK."""
    return {"bearer": f"Bearer {MASK}", "basic": f"Basic {MASK}"}.get(auth.type, MASK)


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = httpx2.URL(url)
    return parsed.scheme, parsed.host, parsed.port


def _backoff(retry: RetryConfig, attempt: int) -> float:
    """Exponential backoff with full jitter."""
    ceiling = min(retry.max_delay_s, retry.base_delay_s * 2 ** (attempt - 1))
    return random.uniform(0, ceiling)  # noqa: S311 (jitter, not crypto)


def _retry_after(response: EgressResponse) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def select(data: Any, path: str) -> Any:
    """`a.b.0.c` picks fields and list indexes; `*` maps over a list (`items.*.name`).
    A missing step gives None."""
    if path in ("", "."):
        return data
    head, _, rest = path.partition(".")
    if head == "*":
        if not isinstance(data, list):
            return None
        return [select(item, rest) for item in data]
    if isinstance(data, dict):
        value = data.get(head)
    elif isinstance(data, list) and head.lstrip("-").isdigit():
        index = int(head)
        value = data[index] if -len(data) <= index < len(data) else None
    else:
        return None
    return value if not rest else select(value, rest)
