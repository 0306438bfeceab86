"""The workflow document's expressions: JMESPath (https://jmespath.org), never Python.

An expression reads the workflow's scope, `{"input": <the workflow's input>, "<step id>":
<that step's output>, ...}`, and returns a value: `input.city`, `geocode.lat`,
`{city: input.city, days: `3`}`, `length(search.results) > `0``. JMESPath has no
assignment, no loops of its own and no access to anything but the value it is given.

What a tenant writes is hostile, so an expression is bounded twice: when it is parsed
(its length, its nesting, its functions known, by name and number of arguments) and when it
is evaluated (a budget of nodes visited, items of the lists and objects produced and
characters of the strings built, so `[@,@] | [@,@] | ...` or `join('', [@,@]) | ...` cannot
multiply a value past it; a string is charged before it is built, and the values `==` and
`contains()` compare are measured first, since a shared value compares in time of its
written size; a result larger than MAX_RESULT_ITEMS is refused).
Errors are our own sentences: no parser or library text reaches a caller.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jmespath
from jmespath import exceptions as jmespath_errors
from jmespath import functions as jmespath_functions
from jmespath.visitor import Options, TreeInterpreter

from tools.runtime.tool import ToolFailed

MAX_EXPRESSION_CHARS = 2000
MAX_EXPRESSION_DEPTH = 100  # nodes within each other; the interpreter recurses per level
EVALUATION_BUDGET = 1_000_000  # nodes visited plus items of the lists and objects produced
MAX_RESULT_ITEMS = 100_000  # values in a result, counted as JSON would write them
MAX_RESULT_CHARS = 5_000_000  # characters of its strings


class ExpressionInvalid(ValueError):
    """The expression does not parse, or asks for something JMESPath does not have."""


class ExpressionFailed(ToolFailed):
    """Evaluating an expression failed at run time; the message is written for the reader
    (a workflow step fails with it)."""


class _Functions(jmespath_functions.Functions):
    """JMESPath's functions, with the ones that build strings (`join`, `to_string`,
    `reverse`) charging what they would write to the evaluation's budget before writing it,
    and `contains` measuring what it compares. A value may share parts (`[@,@] | [@,@]`), so
    its written size is measured by walking it, bounded, never by writing it. (The other
    functions make lists and objects no larger than their arguments, which the interpreter
    charges as they are made, or numbers and booleans.)"""

    def __init__(self, budget: _Budgeted) -> None:
        self.budget = budget

    @jmespath_functions.signature({"types": []})
    def _func_to_string(self, arg: Any) -> str:
        if isinstance(arg, str):
            return arg
        self.budget.charge(measure(arg))
        return json.dumps(arg, separators=(",", ":"))

    @jmespath_functions.signature({"types": ["string"]}, {"types": ["array-string"]})
    def _func_join(self, separator: str, array: list[str]) -> str:
        self.budget.charge(sum(len(s) for s in array) + len(separator) * max(len(array) - 1, 0))
        return separator.join(array)

    @jmespath_functions.signature({"types": ["string", "array"]})
    def _func_reverse(self, arg: Any) -> Any:
        self.budget.charge(len(arg))
        return arg[::-1] if isinstance(arg, str) else list(reversed(arg))

    @jmespath_functions.signature({"types": ["array", "string"]}, {"types": []})
    def _func_contains(self, subject: Any, search: Any) -> bool:
        if isinstance(subject, list):
            self.budget.charge(measure(subject) + measure(search))
        return search in subject


class _Budgeted(TreeInterpreter):
    def __init__(self) -> None:
        super().__init__(Options(custom_functions=_Functions(self)))
        self.left = EVALUATION_BUDGET

    def charge(self, work: int) -> None:
        self.left -= work
        if self.left < 0:
            raise ExpressionFailed("the expression does too much work (its budget ran out)")

    def visit(self, node: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self.charge(1)
        result = super().visit(node, *args, **kwargs)
        if isinstance(result, list | dict):
            self.charge(len(result))
        return result

    def visit_comparator(self, node: dict[str, Any], value: Any) -> Any:
        # `==` of two values sharing parts walks their written size: measure them first.
        if node["value"] in self._EQUALITY_OPS:
            left = self.visit(node["children"][0], value)
            right = self.visit(node["children"][1], value)
            if isinstance(left, list | dict) and isinstance(right, list | dict):
                self.charge(measure(left) + measure(right))
            return self.COMPARATOR_FUNC[node["value"]](left, right)
        return super().visit_comparator(node, value)


@dataclass(frozen=True, eq=False)
class Expression:
    source: str
    ast: dict[str, Any]

    def evaluate(self, scope: Any) -> Any:
        """The expression's value over `scope`; ExpressionFailed when JMESPath refuses a
        value (a function given the wrong type) or the work or the result is too large."""
        try:
            result = _Budgeted().visit(self.ast, scope)
        except ExpressionFailed:
            raise
        except jmespath_errors.JMESPathTypeError as exc:
            raise ExpressionFailed(
                f"{self.source!r}: {exc.function_name}() cannot take a {exc.actual_type}"
            ) from None
        except (jmespath_errors.JMESPathError, TypeError, ValueError, RecursionError) as exc:
            raise ExpressionFailed(f"{self.source!r} failed ({type(exc).__name__})") from None
        measure(result)
        return result

    def root_names(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The scope names the expression reads at its root (`input`, a step's id), with
        the node that reads each. Names inside projections, filters and `&expr` read the
        items there, not the scope, so they are not among them."""
        stack: list[tuple[dict[str, Any], bool]] = [(self.ast, True)]
        while stack:
            node, at_root = stack.pop()
            kind = node["type"]
            children = node.get("children", [])
            if kind == "field":
                if at_root:
                    yield node["value"], node
            elif kind in _LEFT_THEN_ELEMENTS:
                stack.append((children[0], at_root))
                stack.extend((child, False) for child in children[1:])
            elif kind == "expref":
                stack.extend((child, False) for child in children)
            else:
                stack.extend((child, at_root) for child in children)


# Nodes whose first child is read in the current context and whose others read what it
# gives (a field of it, its items, the value piped on).
_LEFT_THEN_ELEMENTS = frozenset(
    {
        "subexpression",
        "index_expression",
        "projection",
        "value_projection",
        "filter_projection",
        "pipe",
    }
)


def parse(source: str) -> Expression:
    """Parse an expression; ExpressionInvalid, with a sentence of our own, when it does not
    parse, is too long or too deep, or calls a function JMESPath lacks (or with a wrong
    number of arguments)."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionInvalid("an expression is a non-empty string")
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionInvalid(f"an expression has at most {MAX_EXPRESSION_CHARS} characters")
    try:
        ast = jmespath.compile(source).parsed
    except jmespath_errors.ParseError as exc:
        where = getattr(exc, "lex_position", None)
        token = getattr(exc, "token_value", None)
        near = f" near {str(token)[:20]!r}" if token not in (None, "") else ""
        at = f" at character {where}" if isinstance(where, int) else ""
        raise ExpressionInvalid(f"the expression does not parse{at}{near}") from None
    except RecursionError:
        raise ExpressionInvalid("the expression nests too deeply") from None
    except jmespath_errors.JMESPathError:
        raise ExpressionInvalid("the expression does not parse") from None
    _check_tree(ast)
    return Expression(source=source, ast=ast)


def _check_tree(ast: dict[str, Any]) -> None:
    stack = [(ast, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise ExpressionInvalid(f"the expression nests deeper than {MAX_EXPRESSION_DEPTH}")
        if node["type"] == "function_expression":
            _check_call(node["value"], len(node["children"]))
        stack.extend((child, depth + 1) for child in node.get("children", []))


def _check_call(name: str, given: int) -> None:
    entry = _Functions.FUNCTION_TABLE.get(name)
    if entry is None:
        raise ExpressionInvalid(f"JMESPath has no function {name}()")
    signature = entry["signature"]
    variadic = bool(signature) and signature[-1].get("variadic", False)
    if (variadic and given < len(signature)) or (not variadic and given != len(signature)):
        wanted = f"at least {len(signature)}" if variadic else str(len(signature))
        raise ExpressionInvalid(f"{name}() takes {wanted} argument(s), not {given}")


def measure(value: Any) -> int:
    """How many values and characters of strings `value` holds, written as JSON;
    ExpressionFailed when more than MAX_RESULT_ITEMS values or MAX_RESULT_CHARS characters.
    Shared parts count each time they would be written; the walk stops as soon as a bound
    is passed."""
    items = chars = 0
    stack = [value]
    while stack:
        node = stack.pop()
        items += 1
        if isinstance(node, str):
            chars += len(node)
        elif isinstance(node, dict):
            chars += sum(len(key) for key in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        if items > MAX_RESULT_ITEMS or chars > MAX_RESULT_CHARS:
            raise ExpressionFailed("the expression's result is too large")
    return items + chars


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null and empty strings, lists and objects are false; every
    other value, 0 included, is true."""
    return not (value is None or value is False or value in ("", [], {}))
