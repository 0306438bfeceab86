"""Tool inputs filled from other tools' outputs (`depends_on`), checked as a graph.

One home for the rules, asked by the configuration compiler (a whole document) and by
every save of a tool definition (the tenant's stored definitions with the one being saved):
each dependency names an input of its tool, a producer that exists and declares an
`output_schema`, a `path` ($.a.b, $.items[0].id, $.items[*].id) naming a field of it, of a
type the input takes; and no tool depends on itself through others. The run fills them
(tools/runtime/frames.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tools.runtime.definitions import Dependency


@dataclass(frozen=True)
class ToolShape:
    """What the graph checks read of a tool."""

    kind: str  # http | builtin
    input_schema: Mapping[str, Any]  # a built-in alias: the built-in's
    output_schema: Mapping[str, Any] | None
    depends_on: Mapping[str, Dependency]


@dataclass(frozen=True)
class DependencyProblem:
    tool: str
    where: str  # relative to the tool: "depends_on.customer_id.path"
    reason: str


def dependency_problems(tools: Mapping[str, ToolShape]) -> list[DependencyProblem]:
    """Every problem of the dependencies among `tools`, in their order."""
    problems: list[DependencyProblem] = []
    for name, tool in tools.items():
        if tool.kind == "builtin" and tool.depends_on:
            problems.append(
                DependencyProblem(name, "depends_on", "only HTTP tools take inputs from tools")
            )
            continue
        inputs = _properties(tool.input_schema)
        for field, dependency in tool.depends_on.items():
            where = f"depends_on.{field}"
            if field not in inputs:
                reason = f"{field!r} is not an input of {name!r} (input_schema)"
                problems.append(DependencyProblem(name, where, reason))
            producer = tools.get(dependency.from_)
            if producer is None:
                reason = f"unknown producer tool {dependency.from_!r}"
                problems.append(DependencyProblem(name, f"{where}.from", reason))
                continue
            if not producer.output_schema:
                reason = f"{dependency.from_!r} declares no output_schema to take a field of"
                problems.append(DependencyProblem(name, f"{where}.from", reason))
                continue
            found = schema_at(producer.output_schema, dependency.path)
            if found is None:
                reason = f"{dependency.from_!r}'s output_schema has no field at {dependency.path}"
                problems.append(DependencyProblem(name, f"{where}.path", reason))
            elif field in inputs and not _types_fit(found, inputs[field]):
                reason = (
                    f"type mismatch: {dependency.from_!r} gives {_type_text(found)} at "
                    f"{dependency.path}, {field!r} takes {_type_text(inputs[field])}"
                )
                problems.append(DependencyProblem(name, where, reason))
    return problems + _cycles(tools)


def _cycles(tools: Mapping[str, ToolShape]) -> list[DependencyProblem]:
    """One problem per cycle, at the dependency that closes it. Depth-first without
    recursion: a chain of hundreds of tools must not overflow the stack."""
    edges = {
        name: [d.from_ for d in tool.depends_on.values() if d.from_ in tools]
        for name, tool in tools.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    reported: set[frozenset[str]] = set()
    problems = []
    for root in tools:
        if root in state:
            continue
        state[root], trail, stack = 1, [root], [iter(edges[root])]
        while stack:
            producer = next(stack[-1], None)
            if producer is None:
                state[trail.pop()] = 2
                stack.pop()
            elif state.get(producer) == 1:
                cycle = [*trail[trail.index(producer) :], producer]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    consumer = trail[-1]
                    field = next(
                        k for k, d in tools[consumer].depends_on.items() if d.from_ == producer
                    )
                    reason = "dependency cycle: " + " -> ".join(reversed(cycle))
                    problems.append(DependencyProblem(consumer, f"depends_on.{field}", reason))
            elif producer not in state:
                state[producer] = 1
                trail.append(producer)
                stack.append(iter(edges[producer]))
    return problems


_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+|\*)\]")


def schema_at(schema: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """The sub-schema describing `path` ($.a.b[0]) of values of `schema`; None if the
    schema declares no such field. Local `$ref`s to `#/$defs/...` are followed; whatever
    is malformed counts as no such field."""
    node: Any = schema
    for match in _STEP.finditer(path[1:]):
        node = _resolve(schema, node)
        if not isinstance(node, Mapping):
            return None
        if match.group(1) is not None:
            node = _properties(node).get(match.group(1))
        else:
            node = node.get("items") if "array" in _types(node) or "items" in node else None
        if node is None:
            return None
    resolved = _resolve(schema, node)
    return resolved if isinstance(resolved, Mapping) else {}


def _properties(schema: Any) -> Mapping[str, Any]:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _resolve(root: Mapping[str, Any], node: Any) -> Any:
    for _ in range(32):  # a chain of references, bounded
        if not (isinstance(node, Mapping) and isinstance(node.get("$ref"), str)):
            return node
        ref, defs = node["$ref"], root.get("$defs")
        if not ref.startswith("#/$defs/") or not isinstance(defs, Mapping):
            return node
        node = defs.get(ref.removeprefix("#/$defs/"))
    return node


def _types(schema: Any) -> set[str]:
    declared = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return set()


def _type_text(schema: Any) -> str:
    return " or ".join(sorted(_types(schema))) or "any"


def _types_fit(produced: Mapping[str, Any], taken: Any) -> bool:
    """Whether every type the producer may give is one the consumer takes (an integer is a
    number); an undeclared type on either side fits."""
    given, accepted = _types(produced), _types(taken)
    if not given or not accepted:
        return True
    if "number" in accepted:
        accepted = accepted | {"integer"}
    return given <= accepted
