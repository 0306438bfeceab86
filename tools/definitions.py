"""ToolDefinition rows -> runtime Tools.

The rules a definition's save must pass — its name, description, schemas, HTTP call,
credentials, dependencies and the tenant's confirmation policy — are the configuration
compiler's (`agents/runtime/config/compiler.py`), run on every save over the tenant's
whole configuration (`agentplatform.config_checks`, `agents.config_saves`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pydantic
from django.core.exceptions import ValidationError
from pydantic import BaseModel

from tools.runtime.builtins import BUILTINS
from tools.runtime.circuit import CircuitStore
from tools.runtime.definitions import (
    BuiltinConfig,
    Dependency,
    default_capability,
    tool_name_refusal,
)
from tools.runtime.dependencies import ToolShape
from tools.runtime.egress import GuardedHttpClient
from tools.runtime.expectations import ExpectationError, ToolExample, parse_examples
from tools.runtime.frames import Source
from tools.runtime.http_tool import HttpToolConfig, build_http_tool
from tools.runtime.tool import Capability, Tool
from tools.runtime.validation import check_schema, compile_validator

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


def examples_problem(definition: ToolDefinition) -> str | None:
    """Why a definition's `examples` cannot be stored: not examples, or arguments its
    input schema refuses."""
    try:
        examples = parse_examples(definition.examples)
    except ExpectationError as exc:
        return str(exc)
    if not examples:
        return None
    schema = definition_shape(definition).input_schema
    try:
        check_schema(schema)
        validate = compile_validator(schema)
    except ValueError:  # (SchemaError, PatternError) the schema's own error is reported
        return None
    for index, example in enumerate(examples):
        if (problem := validate(example.arguments)) is not None:
            return f"[{index}].arguments: {problem}"
    return None


def mcp_examples_problem(declared: Any, listed: list[Any]) -> str | None:
    """Why an MCP connection's `tool_examples` cannot be stored: not `{remote tool name:
    examples}`, or arguments the remote tool's listed input schema refuses (for a tool the
    last listing does not show, only their form is checked)."""
    if not isinstance(declared, dict):
        return 'Give an object of remote tool names to example lists, e.g. {"search": [...]}.'
    schemas = {
        str(r.get("name")): r.get("input_schema")
        for r in listed if isinstance(r, dict)
    }  # fmt: skip
    for name, examples in declared.items():
        try:
            parsed = parse_examples(examples)
        except ExpectationError as exc:
            return f"{name}: {exc}"
        schema = schemas.get(name)
        if not isinstance(schema, dict):
            continue
        try:
            check_schema(schema)
            validate = compile_validator(schema)
        except ValueError:  # the server's schema is refused where the tool is built
            continue
        for index, example in enumerate(parsed):
            if (problem := validate(example.arguments)) is not None:
                return f"{name}[{index}].arguments: {problem}"
    return None


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


def definition_shape(definition: ToolDefinition) -> ToolShape:
    """What the dependency graph reads of a definition; malformed dependencies are left
    out (their save was refused, or they were written around it)."""
    stored = definition.depends_on if isinstance(definition.depends_on, dict) else {}
    depends_on = {}
    for name, value in stored.items():
        try:
            depends_on[name] = Dependency.model_validate(value)
        except pydantic.ValidationError:
            continue
    input_schema, output_schema = definition.input_schema, definition.output_schema
    config = definition.config if isinstance(definition.config, dict) else {}
    builtin = config.get("builtin") if definition.kind == "builtin" else None
    if isinstance(builtin, str) and BUILTINS.has(builtin):
        base = BUILTINS.get(builtin)
        input_schema, output_schema = base.input_schema, output_schema or base.output_schema
    return ToolShape(
        kind=definition.kind,
        input_schema=input_schema if isinstance(input_schema, dict) else {},
        output_schema=output_schema if isinstance(output_schema, dict) else None,
        depends_on=depends_on,
    )


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
