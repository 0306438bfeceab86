"""What the Django definitions and the configuration compiler share about a tenant's tool
definitions, without Django: the `config` of a built-in alias, which names a definition may
take, and the capability a definition gets when it does not state one."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from tools.runtime.builtins import BUILTINS
from tools.runtime.reserved import reserved_reason
from tools.runtime.tool import NAME_PATTERN, Effect

WRITE_EFFECTS = frozenset({Effect.WRITE, Effect.DESTRUCTIVE})
WRITE_NEEDS_CONFIRMATION = (
    "This tool writes, and the tenant's policy requires confirmation for every tool that "
    "writes: require approval (confirmation) for it, or make it read-only."
)


class BuiltinConfig(BaseModel):
    """A tenant's own name, description, tags or capability for a built-in tool (the
    `config` of a definition of kind `builtin`)."""

    model_config = ConfigDict(extra="forbid")
    builtin: str

    @pydantic.field_validator("builtin")
    @classmethod
    def _exists(cls, name: str) -> str:
        if not BUILTINS.has(name):
            raise ValueError(
                f"unknown built-in {name!r}; choose one of {', '.join(BUILTINS.names())}"
            )
        return name


class Dependency(BaseModel):
    """An input filled from another tool's output, never by the model: `{"from":
    "find_customer", "path": "$.id"}`. The configuration compiler checks the graph (the
    producer, its output field, the types, cycles); runs fill it (tools/runtime/frames.py)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str = Field(alias="from", pattern=NAME_PATTERN.pattern, description="The producer.")
    path: str = Field(
        pattern=r"^\$(\.[A-Za-z_][A-Za-z0-9_-]*|\[(\d+|\*)\])*$",
        max_length=300,
        description="Where in the producer's output: $.id, $.items[0].id",
    )


def dependency_problem(depends_on: Any, input_schema: Any) -> str | None:
    """Why a definition's `depends_on` cannot be stored: not a mapping of its own inputs to
    dependencies. (Whether the producers fit is the compiler's question.)"""
    if not isinstance(depends_on, dict):
        return 'give an object: {"<input>": {"from": "<tool>", "path": "$.<field>"}}'
    properties = input_schema.get("properties", {}) if isinstance(input_schema, dict) else {}
    for name, dependency in depends_on.items():
        if name not in properties:
            return f"{name!r} is not an input of this tool (input_schema)"
        try:
            Dependency.model_validate(dependency)
        except pydantic.ValidationError as exc:
            return f"{name}: {exc.errors()[0]['msg']}"
    return None


def tool_name_refusal(name: str, kind: str, config: Any) -> str | None:
    """Why a tenant definition (`kind`, `config`) may not be named `name`: a reserved name,
    or a built-in's that it does not merely tune (kind builtin of that very built-in)."""
    reserved = reserved_reason(name)
    if reserved is not None:
        return reserved
    if BUILTINS.has(name):
        config = config if isinstance(config, dict) else {}
        if kind != "builtin" or config.get("builtin") != name:
            return f"{name!r} is a built-in tool's name; choose another."
    return None


def default_capability(kind: str, config: Any) -> tuple[Effect, bool]:
    """(effect, idempotent) of a definition that leaves them blank. HTTP: GET reads and is
    idempotent, PUT/DELETE are idempotent writes, POST/PATCH non-idempotent writes (a
    missing method is GET); a built-in alias: the built-in's own."""
    config = config if isinstance(config, dict) else {}
    if kind == "builtin":
        name = config.get("builtin")
        if isinstance(name, str) and BUILTINS.has(name):
            capability = BUILTINS.get(name).capability
            return capability.effect, capability.idempotent
        return Effect.NONE, True
    method = config.get("method", "GET")
    return (Effect.READ if method == "GET" else Effect.WRITE), method in ("GET", "PUT", "DELETE")


def effective_effect(kind: str, config: Any, effect: str | None) -> Effect:
    """The effect a definition has: the stated one, else its default."""
    return Effect(effect) if effect else default_capability(kind, config)[0]
