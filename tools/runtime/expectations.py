"""What a tool example (a self-test) or an evaluation case expects of an answer, checked
without running anything a tenant wrote unbounded: exact JSON, a text it contains, a regular
expression (RE2, linear time: tools/runtime/patterns.py), a JSON Schema (our guarded
validator: no `$ref` fetched), or just that it succeeds.

In JSON: `{"succeeds": true}`, `{"exact": <any JSON>}`, `{"contains": "text"}`,
`{"regex": "^A-\\d+$"}`, `{"schema": {...}}`. A tool example is `{"arguments": {...},
"expect": <one of those>, "safe_to_run": false, "name": "..."}` (`expect` defaults to
succeeds; `safe_to_run` lets a write tool's example run).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tools.runtime.patterns import PatternError, compile_pattern
from tools.runtime.validation import SchemaError, check_schema, compile_validator

KINDS = ("succeeds", "exact", "contains", "regex", "schema")
# An evaluation case may also be judged by a model against a rubric: `{"judge": "rubric"}`.
# Its verdict needs a model call, so it is given here (parsed, checked) but decided in
# agents.judging; `failure` refuses it.
CASE_KINDS = (*KINDS, "judge")
MAX_TEXT = 10_000
MAX_EXAMPLES = 20


class ExpectationError(ValueError):
    """Why an expectation or an example cannot be used; the message names the field."""


@dataclass(frozen=True)
class Expectation:
    kind: str = "succeeds"
    value: Any = True

    @classmethod
    def parse(cls, data: Any, *, kinds: tuple[str, ...] = KINDS) -> Expectation:
        """`kinds`: those allowed (a tool example's by default; CASE_KINDS for a case)."""
        if not isinstance(data, Mapping) or len(data) != 1:
            raise ExpectationError(f"give exactly one of: {', '.join(kinds)}")
        [(kind, value)] = data.items()
        if kind not in kinds:
            raise ExpectationError(f"unknown expectation {kind!r}; one of: {', '.join(kinds)}")
        if kind == "succeeds" and value is not True:
            raise ExpectationError("succeeds: true")
        if kind in ("contains", "regex", "judge") and not (
            isinstance(value, str) and value.strip()
        ):
            raise ExpectationError(f"{kind}: a non-empty text")
        if kind in ("contains", "regex", "judge") and len(value) > MAX_TEXT:
            raise ExpectationError(f"{kind}: at most {MAX_TEXT} characters")
        if kind == "regex":
            try:
                compile_pattern(value)
            except PatternError as exc:
                raise ExpectationError(f"regex: {exc}") from None
        if kind == "schema":
            try:
                check_schema(value, what="schema")
            except SchemaError as exc:
                raise ExpectationError(str(exc)) from None
        if kind == "exact" and len(json.dumps(value, default=str)) > MAX_TEXT:
            raise ExpectationError(f"exact: at most {MAX_TEXT} characters of JSON")
        return cls(kind, value)

    def to_dict(self) -> dict[str, Any]:
        return {self.kind: self.value}

    def failure(self, value: Any, error: str | None) -> str | None:
        """Why `value` (or `error`) does not meet this expectation; None when it does."""
        if error is not None:
            return f"failed: {error}"
        if self.kind == "judge":
            raise ValueError("a judge's verdict needs a model: agents.judging decides it")
        if self.kind == "succeeds":
            return None
        if self.kind == "exact":
            if _normal(value) == _normal(self.value):
                return None
            return f"expected exactly {_short(self.value)}, got {_short(value)}"
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if self.kind == "contains":
            return None if self.value in text else f"expected it to contain {self.value!r}"
        if self.kind == "regex":
            return None if compile_pattern(self.value)(text) else f"no match for /{self.value}/"
        problem = compile_validator(self.value)(value)
        return None if problem is None else f"does not match the schema: {problem}"


@dataclass(frozen=True)
class ToolExample:
    """A tool's example: arguments, and what its result should be (a self-test)."""

    arguments: dict[str, Any]
    expect: Expectation = field(default_factory=Expectation)
    safe_to_run: bool = False  # a write tool's example runs only when this says so
    name: str = ""

    @classmethod
    def parse(cls, data: Any) -> ToolExample:
        if not isinstance(data, Mapping):
            raise ExpectationError('an example is an object: {"arguments": {...}, "expect": ...}')
        unknown = set(data) - {"arguments", "expect", "safe_to_run", "name"}
        if unknown:
            raise ExpectationError(f"unknown fields: {', '.join(sorted(unknown))}")
        arguments = data.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ExpectationError("arguments: an object")
        safe, name = data.get("safe_to_run", False), data.get("name", "")
        if not isinstance(safe, bool):
            raise ExpectationError("safe_to_run: true or false")
        if not isinstance(name, str) or len(name) > 100:
            raise ExpectationError("name: a text of at most 100 characters")
        expect = Expectation.parse(data["expect"]) if "expect" in data else Expectation()
        return cls(arguments, expect, safe, name)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"arguments": self.arguments, "expect": self.expect.to_dict()}
        if self.safe_to_run:
            data["safe_to_run"] = True
        if self.name:
            data["name"] = self.name
        return data


def parse_examples(data: Any) -> tuple[ToolExample, ...]:
    """A definition's `examples`: a list of examples; ExpectationError names the bad one."""
    if not isinstance(data, list):
        raise ExpectationError("a list of examples")
    if len(data) > MAX_EXAMPLES:
        raise ExpectationError(f"at most {MAX_EXAMPLES} examples")
    parsed = []
    for index, item in enumerate(data):
        try:
            parsed.append(ToolExample.parse(item))
        except ExpectationError as exc:
            raise ExpectationError(f"[{index}]: {exc}") from None
    return tuple(parsed)


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:200] + "…"
