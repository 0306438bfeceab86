"""ToolDefinition rows -> runtime Tools.

The rules a definition's save must pass — its name, description, schemas, HTTP call,
credentials, dependencies and the tenant's confirmation policy — are the configuration
compiler's (`agents/runtime/config/compiler.py`), run on every save over the tenant's
whole configuration (`base.config_checks`, `agents.config_saves`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pydantic
from django.core.exceptions import ValidationError
from pydantic import BaseModel

from tools.definition_checks import definition_shape
from tools.runtime.builtins import BUILTINS
from tools.runtime.circuit import CircuitStore
from tools.runtime.definitions import (
    BuiltinConfig,
    default_capability,
    tool_name_refusal,
)
from tools.runtime.egress import GuardedHttpClient
from tools.runtime.expectations import ExpectationError, ToolExample, parse_examples
from tools.runtime.frames import Source
from tools.runtime.http_tool import HttpToolConfig, build_http_tool
from tools.runtime.tool import Capability, Tool

if TYPE_CHECKING:
    from tools.models import ToolDefinition


CONFIG_MODELS: dict[str, type[BaseModel]] = {"builtin": BuiltinConfig, "http": HttpToolConfig}


def _pydantic_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def parse_config(definition: ToolDefinition) -> BaseModel:
    try:
        return CONFIG_MODELS[definition.kind].model_validate(definition.config)
    except pydantic.ValidationError as exc:
        raise ValidationError({"config": _pydantic_message(exc)}) from None


def name_refusal(definition: ToolDefinition) -> str | None:
    """Why the definition may not have its name (`tool_name_refusal`). Registries skip such
    rows even if stored."""
    return tool_name_refusal(definition.name, definition.kind, definition.config)


def mcp_examples(declared: Any) -> dict[str, tuple[ToolExample, ...]]:
    """An MCP connection's examples per remote tool; a list that no longer parses is left
    out (changed past validation)."""
    if not isinstance(declared, dict):
        return {}
    found = {}
    for name, examples in declared.items():
        try:
            found[str(name)] = parse_examples(examples or [])
        except ExpectationError:
            continue
    return found


def secret_ref(definition: ToolDefinition) -> str:
    return f"tool:{definition.pk}"


def build_tool(
    definition: ToolDefinition, *, egress: GuardedHttpClient, circuit_store: CircuitStore
) -> Tool:
    config = parse_config(definition)
    default_effect, default_idempotent = default_capability(definition.kind, definition.config)
    capability = Capability(
        effect=definition.effect or default_effect,
        idempotent=default_idempotent if definition.idempotent is None else definition.idempotent,
        requires_approval=definition.requires_approval,
        timeout_s=definition.timeout_s,
        rate_limit_per_minute=definition.rate_limit_per_minute,
    )
    own = _stored_examples(definition)
    if isinstance(config, BuiltinConfig):
        base = BUILTINS.get(config.builtin)
        return Tool(
            name=definition.name,
            description=definition.description or base.description,
            input_schema=base.input_schema,
            handler=base.handler,
            output_schema=base.output_schema,
            tags=base.tags | set(definition.tags),
            examples=base.examples + tuple(e.arguments for e in own),
            capability=capability,
            validate=base.validate,
            selftests=base.selftests + own,
        )
    built = build_http_tool(
        name=definition.name,
        description=definition.description,
        input_schema=definition.input_schema,
        config=config,
        egress=egress,
        circuit_store=circuit_store,
        circuit_key=f"{definition.tenant_id}:{definition.name}",
        secret_ref=secret_ref(definition) if definition.secret else None,
        output_schema=definition.output_schema,
        tags=frozenset(definition.tags),
        capability=capability,
        depends_on={
            name: Source(dependency.from_, dependency.path)
            for name, dependency in definition_shape(definition).depends_on.items()
        },
    )
    if not own:
        return built
    return replace(built, examples=tuple(e.arguments for e in own), selftests=own)


def _stored_examples(definition: ToolDefinition) -> tuple[ToolExample, ...]:
    """The definition's examples; none if they no longer parse (changed past validation)."""
    try:
        return parse_examples(definition.examples or [])
    except ExpectationError:
        return ()
