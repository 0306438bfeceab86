"""What a tool handler gets from the server: who, which run, which call, secrets, limits.

Server-owned values come only from here, never from the model's arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools.runtime.rate_limit import RateLimiter
from tools.runtime.secret_forms import FormMatcher, masked, occur_in

REDACTED = "[redacted]"


class ConfigurationError(Exception):
    """Something the tenant admin must fix (a missing secret, a bad tool config)."""


class SecretAccessor(Protocol):
    def get(self, ref: str) -> str:
        """The plaintext for `ref`; ConfigurationError if unknown."""
        ...

    def redact(self, value: Any) -> Any:
        """`value` (text or JSON-like data) with every known secret replaced."""
        ...


class NoSecrets:
    def get(self, ref: str) -> str:
        raise ConfigurationError(f"secret {ref!r} is not configured")

    def redact(self, value: Any) -> Any:
        return value

    def __bool__(self) -> bool:
        return False


_EXTENDED_KEPT = 64


class StaticSecrets:
    """Secrets held in memory for one tenant, e.g. decrypted when its registry was built.

    `redact` masks each secret and the forms it may be echoed in (base64, hex, percent-
    encoded, reversed: tools/runtime/secret_forms.py). Those are compiled once, at the first
    `redact`; `with_values` shares them and compiles only the values it adds."""

    def __init__(self, values: Mapping[str, str], *, _base: StaticSecrets | None = None) -> None:
        self._values = dict(values)
        self._plaintexts = frozenset(v for v in self._values.values() if v)
        known = _base._plaintexts if _base is not None else frozenset()
        inherited = _base._matchers if _base is not None else ()
        added = self._plaintexts - known
        self._matchers = (*inherited, FormMatcher(added)) if added else inherited
        self._extended: dict[frozenset, StaticSecrets] = {}  # with_values's, kept

    def get(self, ref: str) -> str:
        try:
            return self._values[ref]
        except KeyError:
            raise ConfigurationError(f"secret {ref!r} is not configured") from None

    def redact(self, value: Any) -> Any:
        """`value` itself when no secret occurs in it (one pass over all its texts), else a
        copy with each masked."""
        if not self._plaintexts:
            return value
        texts: list[str] = []
        _collect_texts(value, texts)
        if not occur_in(texts, self._matchers):
            return value
        return _redact(value, self._matchers)

    def __bool__(self) -> bool:
        return bool(self._plaintexts)

    def with_values(self, extra: Mapping[str, str]) -> StaticSecrets:
        """An accessor holding these secrets as well. The same `extra` gives the same one
        (a run adds its connection's key to its tenant's secrets: the forms of that key
        were compiled again for every run, a tenth of a runs worker's CPU per chat)."""
        key = frozenset(extra.items())
        found = self._extended.get(key)
        if found is None:
            if len(self._extended) >= _EXTENDED_KEPT:
                self._extended.clear()
            found = self._extended[key] = StaticSecrets({**self._values, **extra}, _base=self)
        return found


def _collect_texts(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect_texts(key, into)
            _collect_texts(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_texts(item, into)


def _redact(value: Any, matchers: tuple[FormMatcher, ...]) -> Any:
    if isinstance(value, str):
        return masked(value, matchers, REDACTED)
    if isinstance(value, dict):
        return {_redact(k, matchers): _redact(v, matchers) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, matchers) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    max_tool_calls: int = 50
    max_tool_timeout_s: float = 300.0
    max_result_chars: int = 100_000


EventSink = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class ModelTokens:
    """Tokens one model request made by a tool's handler spent (the `llm` built-in)."""

    connection: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "connection": self.connection,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


class UsageMeter:
    """What tools' handlers spent on models, by call id, until the run takes it into its
    usage (agents/runtime/tool_step.py, when the call's result is recorded). One per
    context; the copies `replace` makes for each call share it."""

    __slots__ = ("_by_call", "_refused")

    def __init__(self) -> None:
        self._by_call: dict[str, list[ModelTokens]] = {}
        self._refused: dict[str, list[dict[str, Any]]] = {}

    def add(self, call_id: str | None, tokens: ModelTokens) -> None:
        self._by_call.setdefault(call_id or "", []).append(tokens)

    def take(self, call_id: str) -> list[ModelTokens]:
        """What the call spent, forgotten here (so it is counted once)."""
        return self._by_call.pop(call_id, [])

    def refuse(self, call_id: str | None, payload: dict[str, Any]) -> None:
        """A model call the handler was refused (a quota used up): the run's tool step
        emits it as `tool.quota_exceeded`."""
        self._refused.setdefault(call_id or "", []).append(payload)

    def take_refusals(self, call_id: str) -> list[dict[str, Any]]:
        return self._refused.pop(call_id, [])


class ModelCallMeter(Protocol):
    """Holds the model calls a tool's handler makes itself against the quotas of whoever
    caused them (agents.quotas.ToolModelCalls): `reserve` before the call (raising the
    provider runtime's QuotaRefused when a limit cannot take it), `settle` after, with the
    usage the provider reported (None: nothing used) and the name of the connection that
    answered."""

    async def reserve(self, request: Any, *, price_kind: str) -> Any: ...

    async def settle(
        self, held: Any, *, price_kind: str, model: str, usage: Any, connection: str = ""
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class RunContext:
    tenant_id: int | str
    user_id: int | str | None = None
    # The API key that started the run, when no person did (memory scoped to the key).
    api_key_id: int | str | None = None
    run_id: str | None = None
    call_id: str | None = None
    correlation_id: str | None = None
    secrets: SecretAccessor = field(default_factory=NoSecrets)
    limits: Limits = field(default_factory=Limits)
    events: EventSink | None = None  # gets (type, data): tool.started, .rate_limited, .completed
    # Counts the calls of tools with a rate limit (tools/runtime/rate_limit.py). None: their
    # limits are not enforced (the platform always sets one: tools.services.tool_context).
    rate_limiter: RateLimiter | None = None
    # Tokens a handler spends on models (the `llm` built-in), for the run's usage.
    usage: UsageMeter = field(default_factory=UsageMeter, compare=False)
    # Holds those calls against the quotas; None: not held (the platform always sets one:
    # a run's or a direct call's, agents.runs.direct_calls; else tools.services.tool_context's).
    model_calls: ModelCallMeter | None = field(default=None, compare=False)
    # No person is present: a trigger's run (or a step of one), attributed to its `run_as`
    # member for permissions and records; what needs the person themselves (their own
    # OAuth account at an MCP server) is refused.
    unattended: bool = False
