"""Argument validators compiled once per tool from its JSON Schema.

The common subset that tool schemas use (object/properties/required/additionalProperties,
primitive types, enum/const, string and number bounds, arrays with items) compiles to
plain closures: a few microseconds per call, where `jsonschema` takes ~20 µs. Any other
keyword (anyOf, $ref, patternProperties, ...) makes the whole schema fall back to a
`jsonschema` validator built once. Nothing here execs generated code, so tenant-written
schemas are safe to compile.

Tenant-written schemas can reach nothing outside themselves: `check_schema` refuses any
`$ref`/`$dynamicRef` that is not a local `#...` reference and any `$id` that is a URL, and
every jsonschema validator built here gets a registry that retrieves nothing, whatever is
stored (jsonschema would otherwise fetch `http://` and `file://` references with urllib, and
its resolver errors quote the whole fetched document). Patterns are matched by RE2
(tools.runtime.patterns), in time linear in the text. jsonschema follows every `$ref` afresh
on each call, so `check_schema` also refuses `$ref` cycles and schemas whose `$ref`s expand
to too many or too deeply nested subschemas (a few nested `anyOf` of two `$ref`s each would
otherwise double the work per level).

Error messages name the path and what was expected, for the model to fix its call:
"days: expected integer, got string".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from referencing.exceptions import NoSuchResource, Unresolvable

from tools.runtime.patterns import PatternError, compile_pattern, shown

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


MAX_MESSAGE_CHARS = 300  # a jsonschema message can quote the whole instance


class SchemaError(ValueError):
    """The schema itself is not valid JSON Schema (a tenant admin must fix it)."""


def _retrieve_nothing(uri: str) -> referencing.Resource:
    raise NoSuchResource(ref=uri)


# Given to every jsonschema validator built here: a reference outside the schema is
# unresolvable rather than fetched (jsonschema's default retrieves any URI with urllib).
NO_RETRIEVAL: referencing.Registry = referencing.Registry(retrieve=_retrieve_nothing)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = compile_pattern(pattern)(instance)
    except PatternError as exc:
        yield jsonschema.ValidationError(str(exc))
        return
    if not matched:
        yield jsonschema.ValidationError(f"must match {shown(pattern)}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: dict):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        try:
            matches = compile_pattern(pattern)
        except PatternError as exc:
            yield jsonschema.ValidationError(str(exc))
            return
        for name, value in instance.items():
            if matches(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


# Draft 2020-12 with RE2 for `pattern` and `patternProperties` (jsonschema uses `re`).
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties},
)
# Formats are not asserted: the metaschema's "regex" format would compile patterns with
# Python's `re` (refusing RE2's \p{L}); `_check_keywords` compiles them with RE2 instead.
_METASCHEMA = jsonschema.Draft202012Validator(
    jsonschema.Draft202012Validator.META_SCHEMA, registry=NO_RETRIEVAL
)


def check_schema(schema: Any, *, what: str = "input_schema") -> None:
    """Raise SchemaError unless `schema` is a valid JSON Schema describing an object, whose
    references are all local and resolve, and whose patterns RE2 accepts."""
    if not isinstance(schema, dict):
        raise SchemaError(f"{what} must be a JSON object")
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        raise SchemaError(f"{what} nests deeper than {MAX_SCHEMA_DEPTH} levels")
    resolver = _local_resolver(schema)
    _check_keywords(schema, what, "", resolver)
    error = next(_METASCHEMA.iter_errors(schema), None)
    if error is not None:
        location = "/".join(str(p) for p in error.absolute_path) or "(root)"
        message = _bounded(error.message)
        raise SchemaError(f"{what} is not valid JSON Schema at {location}: {message}")
    _Expansion(what).measure(schema, resolver, "", 0)
    if schema.get("type", "object") != "object":
        raise SchemaError(f'{what} must have "type": "object"')


MAX_SCHEMA_DEPTH = 32  # objects and lists within each other; jsonschema recurses per level


def _depth(node: Any, level: int = 0) -> int:
    """How deeply lists and objects nest in `node` (stops counting past the limit)."""
    if level > MAX_SCHEMA_DEPTH:
        return level
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return max((_depth(child, level + 1) for child in children), default=level)


def _local_resolver(schema: dict) -> referencing.Resolver:
    """A resolver of `schema`'s own references; its subresources (`$id`) are indexed once,
    not searched for on each lookup."""
    resource = _resource(schema)
    uri = resource.id() or ""
    try:
        return NO_RETRIEVAL.with_resource(uri, resource).crawl().resolver(base_uri=uri)
    except (AttributeError, TypeError, ValueError):  # not JSON Schema: the metaschema says why
        return NO_RETRIEVAL.resolver_with_root(resource)


def _resource(node: dict) -> referencing.Resource:
    return referencing.Resource.from_contents(
        node, default_specification=referencing.jsonschema.DRAFT202012
    )


def _check_keywords(node: Any, what: str, where: str, resolver: Any) -> None:
    """References and patterns, looked for in every object of the document (also inside
    `default` or `examples`: simpler than knowing where jsonschema will look, and safe).
    `resolver` is None below an `$id`, where local references have another base."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            _check_keywords(item, what, f"{where}/{index}", resolver)
        return
    if not isinstance(node, dict):
        return
    at = f"{what} at {where.lstrip('/') or '(root)'}"
    identifier = node.get("$id")
    if isinstance(identifier, str):
        if ":" in identifier or identifier.startswith("//"):
            raise SchemaError(f"{at}: $id {shown(identifier)} must not be a URL")
        resolver = None
    for keyword in ("$ref", "$dynamicRef"):
        ref = node.get(keyword)
        if not isinstance(ref, str):
            continue
        if not ref.startswith("#"):
            raise SchemaError(
                f"{at}: {keyword} {shown(ref)} is not allowed; only references within the "
                'schema itself are (such as "#/$defs/name")'
            )
        if keyword == "$dynamicRef":  # its target depends on the call: _Expansion can't bound it
            raise SchemaError(f"{at}: $dynamicRef is not supported; use $ref")
        if keyword == "$ref" and resolver is not None:
            try:
                resolver.lookup(ref)
            except Unresolvable:
                raise SchemaError(f"{at}: $ref {shown(ref)} points to nothing") from None
    patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    if isinstance(node.get("patternProperties"), dict):
        patterns += list(node["patternProperties"])
    try:
        for pattern in patterns:
            compile_pattern(pattern)
    except PatternError as exc:
        raise SchemaError(f"{at}: {exc}") from None
    for key, value in node.items():
        if isinstance(value, dict | list):
            _check_keywords(value, what, f"{where}/{key}", resolver)


MAX_EXPANDED_SUBSCHEMAS = 10_000  # objects in a schema with each `$ref` replaced by its target
MAX_EXPANDED_DEPTH = 100  # lists and objects within each other, `$ref`s followed


class _Expansion:
    """What a schema would be with every `$ref` replaced by what it points to, measured
    without building it: its size (objects, each copy counted) and its depth. Each node is
    measured once and remembered, so this is linear in the schema's own size however large
    the expansion (jsonschema, which follows each `$ref` on every call, is not).

    A `$ref` cycle is refused, even one through `properties` or `items` that a finite value
    would end (a tree of nodes): tool arguments are rarely recursive, and refusing is simpler
    than telling which cycles jsonschema would follow forever."""

    too_deep = f"nests deeper than {MAX_EXPANDED_DEPTH} levels once its $refs are followed"

    def __init__(self, what: str) -> None:
        self.what = what
        self.measured: dict[int, tuple[int, int]] = {}  # id(node) -> (size, depth)
        self.open: set[int] = set()  # nodes being measured: a `$ref` to one is a cycle

    def measure(self, node: Any, resolver: Any, where: str, level: int) -> tuple[int, int]:
        """(size, depth) of `node`, found `level` deep at `where` (named in messages);
        `resolver` resolves its references (its own `$id` applied)."""
        if not isinstance(node, dict | list):
            return 0, 0
        if id(node) in self.open:  # reached again through a `$ref` to what contains it
            raise self.error(where, "is part of a $ref cycle; recursive schemas are not supported")
        if level > MAX_EXPANDED_DEPTH:
            raise self.error(where, self.too_deep)
        known = self.measured.get(id(node))
        if known is None:
            self.open.add(id(node))
            known = self.measure_new(node, resolver, where, level)
            self.open.discard(id(node))
            self.measured[id(node)] = known
        if level + known[1] > MAX_EXPANDED_DEPTH:
            raise self.error(where, self.too_deep)
        return known

    def measure_new(self, node: dict | list, resolver: Any, where: str, level: int):
        # (where, node, resolver of its references) of each child; a `$ref`'s target is one
        items = enumerate(node) if isinstance(node, list) else node.items()
        children = [(f"{where}/{key}", item, _within(item, resolver)) for key, item in items]
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            children.append(self.target(node["$ref"], resolver, where))
        # The root's definitions are each measured (and held to the limits) but not added
        # up: they count where they are used.
        definitions = level == 1 and where in ("/$defs", "/definitions")
        size, depth = (1 if isinstance(node, dict) else 0), 0
        for place, child, child_resolver in children:
            child_size, child_depth = self.measure(child, child_resolver, place, level + 1)
            size += 0 if definitions else child_size
            depth = max(depth, child_depth + 1)
            if size > MAX_EXPANDED_SUBSCHEMAS:
                raise self.error(
                    where,
                    f"expands to more than {MAX_EXPANDED_SUBSCHEMAS:,} subschemas once its "
                    "$refs are followed (each $ref counts as a copy of what it points to)",
                )
        return size, depth

    def target(self, ref: str, resolver: Any, where: str) -> tuple[str, Any, Any]:
        """Where `ref` (at `where`) points: (where, node, resolver of its references)."""
        try:
            resolved = resolver.lookup(ref)
        except Unresolvable:
            raise self.error(where, f"$ref {shown(ref)} points to nothing") from None
        if id(resolved.contents) in self.open:
            raise self.error(
                where,
                f"$ref {shown(ref)} leads back to itself; $ref cycles (recursive schemas) "
                "are not supported",
            )
        place = ref[1:] if ref.startswith("#/") else ref  # a JSON pointer, or an anchor
        return place, resolved.contents, resolved.resolver

    def error(self, where: str, problem: str) -> SchemaError:
        return SchemaError(f"{self.what} at {where.lstrip('/') or '(root)'}: {problem}")


def _within(node: Any, resolver: Any) -> Any:
    """The resolver of `node`'s references: `resolver`, or the one of the subresource that
    `node` starts with its `$id` (to which its references are relative)."""
    if isinstance(node, dict) and isinstance(node.get("$id"), str):
        return resolver.in_subresource(_resource(node))
    return resolver


def _bounded(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[: MAX_MESSAGE_CHARS - 1] + "…"


def compile_validator(schema: dict) -> Callable[[Any], str | None]:
    """A function returning None for valid arguments, else the first error message.
    `schema` should have passed `check_schema` (PatternError for a pattern RE2 refuses)."""
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
    validator = _Validator(schema, registry=NO_RETRIEVAL)

    def validate(value: Any) -> str | None:
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        except Unresolvable:  # its text would quote the document: say who must act instead
            return "the schema has a reference that cannot be resolved (an admin must fix it)"
        if error is None:
            return None
        path = ".".join(str(p) for p in error.absolute_path)
        message = _bounded(error.message)
        return f"{path}: {message}" if path else message

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
        choices = _bounded(", ".join(repr(o) for o in options[:10]))

        def check_enum(value: Any, path: str) -> str | None:
            if any(_json_equal(value, o) for o in options):
                return None
            return f"{_at(path)}: must be one of {choices}"

        checks.append(check_enum)
    if "const" in schema:
        constant = schema["const"]
        expected_constant = _bounded(repr(constant))

        def check_const(value: Any, path: str) -> str | None:
            if _json_equal(value, constant):
                return None
            return f"{_at(path)}: must be {expected_constant}"

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
        matches = compile_pattern(schema["pattern"])
        expected_pattern = shown(schema["pattern"])

        def check_pattern(value: Any, path: str) -> str | None:
            if isinstance(value, str) and not matches(value):
                return f"{_at(path)}: must match {expected_pattern}"
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
