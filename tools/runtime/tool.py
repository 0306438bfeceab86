"""Tool, its Capability contract, ToolCall and ToolResult, and the @tool decorator."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, get_type_hints

import pydantic

from tools.runtime.context import RunContext
from tools.runtime.expectations import ToolExample
from tools.runtime.frames import Source
from tools.runtime.prepared_request import PreparedRequest, PreparesRequests
from tools.runtime.rate_limit import RateLimited
from tools.runtime.validation import SchemaError, check_schema, compile_validator

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# handler(arguments, ctx) -> JSON-able result; sync or async.
Handler = Callable[[dict[str, Any], RunContext], Any]


class ToolFailed(Exception):
    """Raised by a handler to give the model a clean error message (no traceback)."""


class Suspended:
    """A tool result meaning "not done yet: a human must act first" (a child run waits for
    an approval; a person must connect their account to a server). The agent loop keeps the
    call pending and parks the run; running the call again later picks up where it was.
    `event`: (type, payload) the run emits to tell the human what to do, if any."""

    def __init__(
        self,
        reason: str,
        child_run_id: Any = None,
        event: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        self.reason = reason
        self.child_run_id = child_run_id
        self.event = event


class Effect(StrEnum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    DESTRUCTIVE = "destructive"


@dataclass(frozen=True, slots=True)
class Capability:
    effect: Effect = Effect.READ
    idempotent: bool = True
    requires_approval: bool = False
    timeout_s: float = 30.0
    rate_limit_per_minute: int | None = None  # per tenant, across processes; None: no limit

    def __post_init__(self) -> None:
        object.__setattr__(self, "effect", Effect(self.effect))
        if not 0 < self.timeout_s <= 3600:
            raise ValueError("timeout_s must be within (0, 3600]")
        limit = self.rate_limit_per_minute
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ValueError("rate_limit_per_minute must be a whole number from 1, or None")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # The exact request this call sends, once prepared for a human to confirm (tools with a
    # preparer only); set, executing the call sends exactly it.
    prepared: PreparedRequest | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    name: str
    result: Any = None
    error: str | None = None
    latency_ms: float = 0.0
    rate_limited: RateLimited | None = None  # set: not executed, over its tool's rate limit
    # What the handler returned, before the tool's `view`: for the run's frame (frames.py).
    data: Any = None

    @property
    def is_error(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class Tool:
    """A named capability the model may call.

    `validate` defaults to a validator compiled from `input_schema` when the Tool is
    made; it returns None or an error message for the model.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    output_schema: dict[str, Any] | None = None
    tags: frozenset[str] = frozenset()
    examples: tuple[dict[str, Any], ...] = ()  # arguments, as the model and people see them
    capability: Capability = field(default_factory=Capability)
    validate: Callable[[Any], str | None] | None = None
    # Tools that send one request per call (HTTP tools): it can be prepared, shown, then sent.
    preparer: PreparesRequests | None = None
    # What of a result the model sees (an HTTP tool's `model_view`); None: all of it.
    view: Callable[[Any], Any] | None = None
    # The run's frame (frames.py): inputs filled from other tools' results, hidden from the
    # model; arguments that take a reference token, by kind; result paths shown as tokens.
    depends_on: Mapping[str, Source] = field(default_factory=dict)
    reference_inputs: Mapping[str, str] = field(default_factory=dict)
    references: Mapping[str, str] = field(default_factory=dict)
    # Examples with what their result should be: the tool's self-tests (agents/selftests.py).
    selftests: tuple[ToolExample, ...] = ()
    is_async: bool = field(init=False)
    model_schema: dict[str, Any] = field(init=False)  # input_schema as the model is offered it

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {NAME_PATTERN.pattern}")
        if not self.description.strip():
            raise ValueError(f"tool {self.name!r} needs a description the model can read")
        try:
            check_schema(self.input_schema)
            if self.output_schema is not None:
                check_schema(self.output_schema, what="output_schema")
        except SchemaError as exc:
            raise ValueError(f"tool {self.name!r}: {exc}") from None
        object.__setattr__(self, "tags", frozenset(self.tags))
        object.__setattr__(self, "examples", tuple(self.examples))
        if self.validate is None:
            object.__setattr__(self, "validate", compile_validator(self.input_schema))
        object.__setattr__(self, "is_async", _is_async(self.handler))
        schema = model_input_schema(self.input_schema, self.depends_on, self.reference_inputs)
        object.__setattr__(self, "model_schema", schema)


def model_input_schema(
    input_schema: dict[str, Any], filled: Iterable[str], reference_inputs: Mapping[str, str]
) -> dict[str, Any]:
    """An input schema as the model is offered it: without the inputs the runtime fills
    (`filled`, from other tools' results), and saying which inputs take a reference token
    (the runtime maps it back). The compiler's model contract and every run use this."""
    filled = set(filled)
    if not (filled or reference_inputs):
        return input_schema
    schema = dict(input_schema)
    properties = {k: v for k, v in schema.get("properties", {}).items() if k not in filled}
    for name, kind in reference_inputs.items():
        if isinstance(properties.get(name), dict):
            hint = f"A {kind} reference such as {kind}#1, as a tool's result showed it."
            described = properties[name].get("description", "")
            properties[name] = {**properties[name], "description": f"{described} {hint}".strip()}
    schema["properties"] = properties
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in filled]
    return schema


def _is_async(handler: Callable) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 (callable objects)
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def tool(
    function: Callable | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    tags: frozenset[str] | set[str] = frozenset(),
    examples: tuple[dict | ToolExample, ...] = (),
    capability: Capability | None = None,
) -> Any:
    """Make a Tool from an annotated function: docstring -> description, signature -> schema.

    A parameter annotated `RunContext` receives the context and is hidden from the schema.
    Arguments are validated (and coerced, e.g. "3" stays invalid for int: strict) by a
    pydantic model built once from the signature.
    """

    def build(fn: Callable) -> Tool:
        hints = get_type_hints(fn)
        ctx_param = None
        fields: dict[str, Any] = {}
        for param in inspect.signature(fn).parameters.values():
            annotation = hints.get(param.name, Any)
            if annotation is RunContext:
                ctx_param = param.name
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (annotation, default)
        model = pydantic.create_model(
            f"{fn.__name__}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", strict=True),
            **fields,
        )
        schema = _clean_schema(model.model_json_schema())
        is_async = inspect.iscoroutinefunction(fn)

        def call_kwargs(arguments: dict, ctx: RunContext) -> dict:
            # The registry has checked the JSON Schema; pydantic now builds the values once.
            try:
                values = dict(model.model_validate(arguments))
            except pydantic.ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "arguments"
                raise ToolFailed(f"invalid arguments: {where}: {first['msg']}") from None
            if ctx_param:
                values[ctx_param] = ctx
            return values

        if is_async:

            async def handler(arguments: dict, ctx: RunContext) -> Any:
                return await fn(**call_kwargs(arguments, ctx))
        else:

            def handler(arguments: dict, ctx: RunContext) -> Any:
                return fn(**call_kwargs(arguments, ctx))

        return Tool(
            name=name or fn.__name__,
            description=description or inspect.cleandoc(fn.__doc__ or ""),
            input_schema=schema,
            handler=handler,
            tags=frozenset(tags),
            examples=tuple(e.arguments if isinstance(e, ToolExample) else e for e in examples),
            capability=capability or Capability(),
            selftests=tuple(e for e in examples if isinstance(e, ToolExample)),
        )

    return build(function) if function is not None else build


def _clean_schema(schema: Any) -> Any:
    """Pydantic's schema without the titles models don't need (property names kept)."""
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs"):
            cleaned[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        else:
            cleaned[key] = _clean_schema(value)
    return cleaned
