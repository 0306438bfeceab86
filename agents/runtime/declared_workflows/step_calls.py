"""What the compiled workflow's runtime steps call: plain objects (no closures over the
compiler), each reading and writing the scope `{"input": ..., "<step id>": output}` that
the steps pass along (agents/runtime/declared_workflows/compiler.py builds them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.runtime.declared_workflows.expressions import Expression, truthy
from tools.runtime.tool import ToolFailed
from tools.runtime.validation import compile_validator


class Begin:
    """The first step: the input checked against its schema, then the scope made."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.check = compile_validator(schema)

    def __call__(self, value: Any) -> dict[str, Any]:
        why = self.check(value)
        if why is not None:
            raise ToolFailed(f"the workflow's input is not valid: {why}")
        return {"input": value}


class End:
    """The last step: the last step's output, checked against the output schema."""

    def __init__(self, last: str, schema: dict[str, Any] | None) -> None:
        self.last = last
        self.check = compile_validator(schema) if schema is not None else None

    def __call__(self, scope: dict[str, Any]) -> Any:
        output = scope.get(self.last)
        why = self.check(output) if self.check is not None else None
        if why is not None:
            raise ToolFailed(f"the workflow's output is not valid: {why}")
        return output


@dataclass(frozen=True)
class Store:
    id: str
    expression: Expression

    def __call__(self, scope: dict[str, Any]) -> dict[str, Any]:
        return {**scope, self.id: self.expression.evaluate(scope)}


@dataclass(frozen=True)
class Arguments:
    expression: Expression

    def __call__(self, scope: dict[str, Any]) -> dict[str, Any]:
        value = self.expression.evaluate(scope)
        if not isinstance(value, dict):
            raise ToolFailed(f"the arguments {self.expression.source!r} are not an object")
        return value


@dataclass(frozen=True)
class NamedArguments:
    expressions: Mapping[str, Expression]

    def __call__(self, scope: dict[str, Any]) -> dict[str, Any]:
        return {name: e.evaluate(scope) for name, e in self.expressions.items()}


@dataclass(frozen=True)
class Prompt:
    expression: Expression

    def __call__(self, scope: dict[str, Any]) -> str:
        value = self.expression.evaluate(scope)
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Condition:
    expression: Expression

    def __call__(self, scope: dict[str, Any]) -> bool:
        return truthy(self.expression.evaluate(scope))


@dataclass(frozen=True)
class Join:
    """After a parallel step: the scope it started from (the first branch's, which holds
    it), with each branch's last output under the step's id."""

    id: str
    kept: tuple[str, ...]
    lasts: Mapping[str, str]

    def __call__(self, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        first = results[next(iter(self.lasts))]
        scope = {name: first[name] for name in self.kept if name in first}
        scope[self.id] = {key: results[key].get(last) for key, last in self.lasts.items()}
        return scope


@dataclass(frozen=True)
class Keep:
    """At the end of a branch's arm: the scope it started from, with the arm's last output
    (None without one) under the branch's id."""

    id: str
    kept: tuple[str, ...]
    last: str | None

    def __call__(self, scope: dict[str, Any]) -> dict[str, Any]:
        kept = {name: scope[name] for name in self.kept if name in scope}
        kept[self.id] = scope.get(self.last) if self.last is not None else None
        return kept
