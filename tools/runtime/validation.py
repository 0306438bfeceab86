"""Argument validators compiled once per tool from its JSON Schema.

The common subset that tool schemas use (object/properties/required/additionalProperties,
primitive types, enum/const, string and number bounds, arrays with items) compiles to
plain closures: a few microseconds per call, where `jsonschema` takes ~20 µs. Any other
keyword (anyOf, $ref, patternProperties, ...) makes the whole schema fall back to a
`jsonschema` validator built once. Nothing here execs generated code, so tenant-written
schemas are safe to compile.

Error messages name the path and what was expected, for the model to fix its call:
"days: expected integer, got string".
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import jsonschema

Check = Callable[[Any, str], str | None]  # (value, path) -> error message or None

# Validation keywords compiled here are handled below; these others send the whole schema
# to jsonschema. Unknown keywords are annotations (JSON Schema ignores them).
_FALLBACK = frozenset(
    {"anyOf", "oneOf", "allOf", "not", "$ref", "$dynamicRef", "$defs", "definitions", "if",
     "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
     "patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
     "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
     "uniqueItems", "multipleOf"}
)  # fmt: skip


class SchemaError(ValueError):
    """The schema itself is not valid JSON Schema (a tenant admin must fix it)."""


def check_schema(schema: Any, *, what: str = "input_schema") -> None:
    """Raise SchemaError unless `schema` is a valid JSON Schema describing an object."""
    if not isinstance(schema, dict):
        raise SchemaError(f"{what} must be a JSON object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        location = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise SchemaError(f"{what} is not valid JSON Schema at {location}: {exc.message}") from None
    if schema.get("type", "object") != "object":
        raise SchemaError(f'{what} must have "type": "object"')


def compile_validator(schema: dict) -> Callable[[Any], str | None]:
    """A function returning None for valid arguments, else the first error message."""
    try:
        check = _compile(schema)
    except _Unsupported:
        return _jsonschema_validator(schema)

    def validate(value: Any) -> str | None:
        return check(value, "")

    return validate


class _Unsupported(Exception):
    pass


def _jsonschema_validator(schema: dict) -> Callable[[Any], str | None]:
    validator = jsonschema.Draft202012Validator(schema)

    def validate(value: Any) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        path = ".".join(str(p) for p in error.absolute_path)
        return f"{path}: {error.message}" if path else error.message

    return validate


def _at(path: str) -> str:
    return path or "arguments"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list | tuple)
    if name == "null":
        return value is None
    raise _Unsupported(name)


def _compile(schema: Any) -> Check:
    if schema is True or schema == {}:
        return lambda value, path: None
    if schema is False:
        return lambda value, path: f"{_at(path)}: no value is allowed here"
    if not isinstance(schema, dict) or not _FALLBACK.isdisjoint(schema):
        raise _Unsupported
    checks: list[Check] = []

    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        for name in names:
            _is_type(None, name)  # raises _Unsupported for unknown type names
        expected = " or ".join(names)

        def check_type(value: Any, path: str) -> str | None:
            for name in names:
                if _is_type(value, name):
                    return None
            return f"{_at(path)}: expected {expected}, got {_type_name(value)}"

        checks.append(check_type)

    if "enum" in schema:
        options = list(schema["enum"])
        shown = ", ".join(repr(o) for o in options[:10])

        def check_enum(value: Any, path: str) -> str | None:
            if any(_json_equal(value, o) for o in options):
                return None
            return f"{_at(path)}: must be one of {shown}"

        checks.append(check_enum)
    if "const" in schema:
        constant = schema["const"]

        def check_const(value: Any, path: str) -> str | None:
            return None if _json_equal(value, constant) else f"{_at(path)}: must be {constant!r}"

        checks.append(check_const)

    checks.extend(_string_checks(schema))
    checks.extend(_number_checks(schema))
    checks.extend(_array_checks(schema))
    checks.extend(_object_checks(schema))

    if len(checks) == 1:
        return checks[0]

    def check_all(value: Any, path: str) -> str | None:
        for check in checks:
            error = check(value, path)
            if error is not None:
                return error
        return None

    return check_all


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: true != 1, 1 == 1.0
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _string_checks(schema: dict) -> list[Check]:
    checks: list[Check] = []
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low is not None or high is not None:

        def check_length(value: Any, path: str) -> str | None:
            if not isinstance(value, str):
                return None
            if low is not None and len(value) < low:
                return f"{_at(path)}: must be at least {low} characters"
            if high is not None and len(value) > high:
                return f"{_at(path)}: must be at most {high} characters"
            return None

        checks.append(check_length)
    if "pattern" in schema:
        pattern = re.compile(schema["pattern"])

        def check_pattern(value: Any, path: str) -> str | None:
            if isinstance(value, str) and pattern.search(value) is None:
                return f"{_at(path)}: must match {pattern.pattern!r}"
            return None

        checks.append(check_pattern)
    return checks


def _number_checks(schema: dict) -> list[Check]:
    bounds = [
        (schema.get("minimum"), lambda v, b: v >= b, "≥"),
        (schema.get("maximum"), lambda v, b: v <= b, "≤"),
        (schema.get("exclusiveMinimum"), lambda v, b: v > b, ">"),
        (schema.get("exclusiveMaximum"), lambda v, b: v < b, "<"),
    ]
    bounds = [(b, ok, sign) for b, ok, sign in bounds if b is not None]
    if not bounds:
        return []

    def check_bounds(value: Any, path: str) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if isinstance(value, float) and math.isnan(value):
            return f"{_at(path)}: must be a number"
        for bound, ok, sign in bounds:
            if not ok(value, bound):
                return f"{_at(path)}: must be {sign} {bound}"
        return None

    return [check_bounds]


def _array_checks(schema: dict) -> list[Check]:
    checks: list[Check] = []
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None or high is not None:

        def check_count(value: Any, path: str) -> str | None:
            if not isinstance(value, list | tuple):
                return None
            if low is not None and len(value) < low:
                return f"{_at(path)}: needs at least {low} items"
            if high is not None and len(value) > high:
                return f"{_at(path)}: allows at most {high} items"
            return None

        checks.append(check_count)
    if "items" in schema:
        item_check = _compile(schema["items"])

        def check_items(value: Any, path: str) -> str | None:
            if not isinstance(value, list | tuple):
                return None
            for index, item in enumerate(value):
                error = item_check(item, f"{path}[{index}]")
                if error is not None:
                    return error
            return None

        checks.append(check_items)
    return checks


def _object_checks(schema: dict) -> list[Check]:
    properties = {name: _compile(sub) for name, sub in schema.get("properties", {}).items()}
    required = list(schema.get("required", []))
    extra = schema.get("additionalProperties", True)
    extra_check = None if extra is True or extra is False else _compile(extra)
    low, high = schema.get("minProperties"), schema.get("maxProperties")
    if not (properties or required or extra is not True or low is not None or high is not None):
        return []

    def check_object(value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return None
        prefix = f"{path}." if path else ""
        for name in required:
            if name not in value:
                return f"{prefix}{name}: required"
        for name, item in value.items():
            check = properties.get(name)
            if check is not None:
                error = check(item, prefix + name)
            elif extra is False:
                allowed = ", ".join(properties) or "none"
                return f"{prefix}{name}: unexpected argument (allowed: {allowed})"
            elif extra_check is not None:
                error = extra_check(item, prefix + name)
            else:
                continue
            if error is not None:
                return error
        if low is not None and len(value) < low:
            return f"{_at(path)}: needs at least {low} properties"
        if high is not None and len(value) > high:
            return f"{_at(path)}: allows at most {high} properties"
        return None

    return [check_object]
