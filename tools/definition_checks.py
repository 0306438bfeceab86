"""A tool definition's stored fields read without its model: the shape the dependency graph
checks (`definition_shape`), and whether a definition's examples, or an MCP connection's, fit
the input schemas they are for. The models' own validation (tools/models.py) asks these, so
this module names no model: what it reads of a definition is `StoredDefinition`."""

from __future__ import annotations

from typing import Any, Protocol

import pydantic

from tools.runtime.builtins import BUILTINS
from tools.runtime.definitions import Dependency
from tools.runtime.dependencies import ToolShape
from tools.runtime.expectations import ExpectationError, parse_examples
from tools.runtime.validation import check_schema, compile_validator


class StoredDefinition(Protocol):
    """The fields of a tool definition read here, as stored (tools.models.ToolDefinition):
    the JSON ones may hold anything a write around validation left."""

    kind: str
    config: Any
    input_schema: Any
    output_schema: Any
    depends_on: Any
    examples: Any


def definition_shape(definition: StoredDefinition) -> ToolShape:
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


def examples_problem(definition: StoredDefinition) -> str | None:
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
