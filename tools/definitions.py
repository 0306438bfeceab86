"""ToolDefinition rows -> runtime Tools, and the validation that guards saving them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pydantic
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from pydantic import BaseModel

from tools.runtime.builtins import BUILTINS
from tools.runtime.circuit import CircuitStore
from tools.runtime.credential_leaks import credential_names, url_credential_problem
from tools.runtime.definitions import (
    WRITE_EFFECTS,
    WRITE_NEEDS_CONFIRMATION,
    BuiltinConfig,
    Dependency,
    default_capability,
    dependency_problem,
    effective_effect,
    tool_name_refusal,
)
from tools.runtime.dependencies import ToolShape, dependency_problems
from tools.runtime.egress import GuardedHttpClient
from tools.runtime.expectations import ExpectationError, ToolExample, parse_examples
from tools.runtime.frames import Source
from tools.runtime.http_tool import HttpToolConfig, build_http_tool
from tools.runtime.tool import Capability, Tool
from tools.runtime.validation import SchemaError, check_schema, compile_validator

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


def validate_definition(definition: ToolDefinition) -> None:
    """ValidationError naming the field, for forms and the API alike."""
    errors: dict[str, str] = {}
    refused = name_refusal(definition)
    if refused is not None:
        raise ValidationError({"name": refused})
    if definition.kind == "http":
        if not (definition.description or "").strip():
            errors["description"] = "Describe the tool for the model."
        try:
            check_schema(definition.input_schema)
        except SchemaError as exc:
            errors["input_schema"] = str(exc)
    if definition.output_schema is not None:
        try:
            check_schema(definition.output_schema, what="output_schema")
        except SchemaError as exc:
            errors["output_schema"] = str(exc)
    if (problem := dependency_problem(definition.depends_on, definition.input_schema)) is not None:
        errors["depends_on"] = problem
    if (problem := examples_problem(definition)) is not None:
        errors["examples"] = problem
    if errors:
        raise ValidationError(errors)
    config = parse_config(definition)
    if (
        definition.tenant_id is not None
        and definition.tenant.require_confirmation_for_writes
        and not definition.requires_approval
        and effective_effect(definition.kind, definition.config, definition.effect) in WRITE_EFFECTS
    ):
        raise ValidationError({"requires_approval": WRITE_NEEDS_CONFIRMATION})
    if isinstance(config, HttpToolConfig):
        if (leak := http_credential_problem(config)) is not None:
            raise ValidationError({"config": leak})
        try:
            config.check_against_schema(definition.input_schema)
        except ValueError as exc:
            raise ValidationError({"config": str(exc)}) from None
        if config.auth is not None and not definition.secret:
            raise ValidationError({"secret": f"{config.auth.type} auth needs a secret."})
    if not getattr(definition, "graph_checked", False) and (
        broken := dependency_graph_errors(definition)
    ):
        raise ValidationError(broken)


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


def dependency_graph_errors(definition: ToolDefinition) -> dict[str, list[str]]:
    """The problems saving `definition` would add to its tenant's dependency graph
    (`tools/runtime/dependencies.py`): its own dependencies, and those of tools depending on
    it (a renamed producer, a field gone from its output). Problems already stored are not
    this save's. One query when the tenant has no dependencies; two when it has."""
    from tools.models import ToolDefinition

    stored = ToolDefinition.objects.filter(tenant_id=definition.tenant_id)
    others = stored.exclude(pk=definition.pk) if definition.pk else stored
    if not definition.depends_on and not others.exclude(depends_on={}).exists():
        return {}
    rows = list(stored)
    before = {row.name: definition_shape(row) for row in rows}
    after = {row.name: definition_shape(row) for row in rows if row.pk != definition.pk}
    after[definition.name] = definition_shape(definition)
    known = {(p.tool, p.where, p.reason) for p in dependency_problems(before)}
    new = [p for p in dependency_problems(after) if (p.tool, p.where, p.reason) not in known]
    errors: dict[str, list[str]] = {}
    for problem in new:
        if problem.tool == definition.name:
            errors.setdefault("depends_on", []).append(f"{problem.where}: {problem.reason}")
        else:
            errors.setdefault(NON_FIELD_ERRORS, []).append(
                f"tool {problem.tool!r} depends on this one: {problem.reason}"
            )
    return errors


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


def http_credential_problem(config: HttpToolConfig) -> str | None:
    """A credential written into an HTTP tool's URL or fixed values (`auth` and the secret
    are where it belongs)."""
    if (problem := url_credential_problem(config.url)) is not None:
        return f"url: {problem}"
    for where, names in (
        ("fixed.query", config.fixed.query),
        ("fixed.headers", config.fixed.headers),
    ):
        if leaked := credential_names(names):
            return f"{where}: {leaked[0]!r} looks like a credential; use auth and the secret"
    return None


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
