"""Safe arithmetic for the calculator tool: `ast.parse` plus a whitelist walk, never `eval`.

Every refusal raises `CalculatorError`, whose message names what was refused so the model
can rewrite its expression. Cost is bounded: at most `MAX_EXPRESSION_LENGTH` characters,
`MAX_DEPTH` levels of nesting, every intermediate integer below 10**`MAX_INT_DIGITS` (powers
are estimated and refused *before* they are computed), and finite floats only. Any input is
answered or refused in about a millisecond.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

Number: TypeAlias = int | float

MAX_EXPRESSION_LENGTH = 1000
MAX_DEPTH = 50
MAX_INT_DIGITS = 1000
MAX_FACTORIAL_ARGUMENT = 1000

_INT_LIMIT = 10**MAX_INT_DIGITS  # smallest integer with more than MAX_INT_DIGITS digits
_INT_LIMIT_BITS = _INT_LIMIT.bit_length()
_TOO_LARGE_INT = f"result is too large (integers are limited to {MAX_INT_DIGITS} digits)"
_TOO_LARGE_FLOAT = "number is too large for floating-point arithmetic (limit about 1.8e308)"
_NOT_FINITE = "result is not a finite number"


class CalculatorError(ValueError):
    """The expression was refused; `str(exc)` says why, in words the model can act on."""


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; raises CalculatorError.

    Integers stay integers where Python keeps them (`2**10`, `7 // 2`); `/` gives a float.
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, not {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CalculatorError(
            f"expression is too long ({len(expression)} characters; "
            f"the limit is {MAX_EXPRESSION_LENGTH})"
        )
    source = expression.strip()
    if not source:
        raise CalculatorError("expression is empty")
    return _Evaluator(source).evaluate(_parse(source), depth=1)


def _parse(source: str) -> ast.expr:
    try:
        return ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        # Drop CPython's hints ("Maybe you meant '=='...") that point at refused syntax.
        reason = (exc.msg or "invalid syntax").split(". Maybe you meant")[0]
        where = f" (at character {exc.offset})" if exc.offset else ""
        raise CalculatorError(f"invalid expression: {reason}{where}") from exc
    except (RecursionError, MemoryError):
        raise CalculatorError("invalid expression: too deeply nested") from None
    except ValueError as exc:  # e.g. "source code string cannot contain null bytes"
        raise CalculatorError(f"invalid expression: {exc}") from exc


def _checked(value: object) -> Number:
    """Return `value` if it is a finite float or an int within the digit limit."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError(_NOT_FINITE)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() >= _INT_LIMIT_BITS and abs(value) >= _INT_LIMIT:
            raise CalculatorError(_TOO_LARGE_INT)
        return value
    raise CalculatorError("result is not a real number")


# --- operators -----------------------------------------------------------------------------


def _integer_power_too_large(base: Number, exponent: Number) -> bool:
    """Estimate, without computing it, whether int ** int exceeds MAX_INT_DIGITS digits."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0:
        return False
    if abs(base) <= 1:
        return False
    # |base| >= 2, so an exponent above the limit's bit length always overflows; below it,
    # exponent * log10(|base|) estimates the digit count (the exact check is in _checked).
    return exponent > _INT_LIMIT_BITS or exponent * math.log10(abs(base)) > MAX_INT_DIGITS + 1


def _power(base: Number, exponent: Number) -> Number:
    """`base ** exponent`, refusing integer results that would be too large before computing."""
    if _integer_power_too_large(base, exponent):
        raise CalculatorError(
            f"exponentiation result is too large (integers are limited to {MAX_INT_DIGITS} digits)"
        )
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise CalculatorError("a negative number raised to a fractional power is not a real number")
    try:
        return base**exponent
    except ZeroDivisionError:
        raise CalculatorError("zero cannot be raised to a negative power") from None


_BINARY_OPERATORS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
}
_REFUSED_OPERATOR_SYMBOLS: dict[type[ast.AST], str] = {
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
    ast.Invert: "~",
}
_ALLOWED_OPERATORS = "+ - * / // % ** and parentheses"


# --- functions -----------------------------------------------------------------------------


def _integer_argument(function: str, value: Number) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise CalculatorError(f"{function}() requires integer arguments, got {value!r}")
        return int(value)
    return value


def _round(value: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(value)
    places = _integer_argument("round", ndigits)
    # round(int, -n) computes 10**n internally, so n must be bounded.
    if abs(places) > MAX_INT_DIGITS:
        raise CalculatorError(
            f"round() ndigits must be between -{MAX_INT_DIGITS} and {MAX_INT_DIGITS}"
        )
    return round(value, places)


def _factorial(value: Number) -> int:
    n = _integer_argument("factorial", value)
    if n < 0:
        raise CalculatorError("factorial() is only defined for non-negative integers")
    if n > MAX_FACTORIAL_ARGUMENT:
        raise CalculatorError(f"factorial() argument must be at most {MAX_FACTORIAL_ARGUMENT}")
    return math.factorial(n)


def _gcd(*values: Number) -> int:
    return math.gcd(*(_integer_argument("gcd", value) for value in values))


def _lcm(*values: Number) -> int:
    # Pairwise, so a long argument list cannot build a huge intermediate value.
    result = _integer_argument("lcm", values[0])
    for value in values[1:]:
        result = _checked(math.lcm(result, _integer_argument("lcm", value)))
    return result


@dataclass(frozen=True)
class _Function:
    implementation: Callable[..., Number]
    min_args: int
    max_args: int | None  # None: no upper bound

    def arity_error(self, name: str, given: int) -> str | None:
        if self.min_args <= given and (self.max_args is None or given <= self.max_args):
            return None
        if self.max_args is None:
            expected = f"at least {self.min_args}"
        elif self.min_args == self.max_args:
            expected = f"exactly {self.min_args}"
        else:
            expected = f"{self.min_args} or {self.max_args}"
        plural = "" if expected == "exactly 1" else "s"
        return f"{name}() takes {expected} argument{plural} ({given} given)"


_FUNCTIONS: dict[str, _Function] = {
    "abs": _Function(abs, 1, 1),
    "round": _Function(_round, 1, 2),
    "min": _Function(min, 2, None),
    "max": _Function(max, 2, None),
    "sqrt": _Function(math.sqrt, 1, 1),
    "cbrt": _Function(math.cbrt, 1, 1),
    "exp": _Function(math.exp, 1, 1),
    "log": _Function(math.log, 1, 2),
    "log2": _Function(math.log2, 1, 1),
    "log10": _Function(math.log10, 1, 1),
    "sin": _Function(math.sin, 1, 1),
    "cos": _Function(math.cos, 1, 1),
    "tan": _Function(math.tan, 1, 1),
    "asin": _Function(math.asin, 1, 1),
    "acos": _Function(math.acos, 1, 1),
    "atan": _Function(math.atan, 1, 1),
    "atan2": _Function(math.atan2, 2, 2),
    "sinh": _Function(math.sinh, 1, 1),
    "cosh": _Function(math.cosh, 1, 1),
    "tanh": _Function(math.tanh, 1, 1),
    "degrees": _Function(math.degrees, 1, 1),
    "radians": _Function(math.radians, 1, 1),
    "floor": _Function(math.floor, 1, 1),
    "ceil": _Function(math.ceil, 1, 1),
    "trunc": _Function(math.trunc, 1, 1),
    "factorial": _Function(_factorial, 1, 1),
    "gcd": _Function(_gcd, 2, None),
    "lcm": _Function(_lcm, 2, None),
    "hypot": _Function(math.hypot, 1, None),
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


# --- refused syntax ------------------------------------------------------------------------

_REFUSED_SYNTAX: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts (indexing) are not allowed",
    ast.Compare: "comparisons are not allowed",
    ast.BoolOp: "boolean operators (and/or) are not allowed",
    ast.IfExp: "conditional expressions are not allowed",
    ast.Lambda: "lambda expressions are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.NamedExpr: "assignment expressions (:=) are not allowed",
    ast.List: "lists are not allowed",
    ast.Tuple: "tuples are not allowed",
    ast.Set: "sets are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Starred: "*args and **kwargs are not allowed; pass arguments positionally",
}
_REFUSED_LITERALS: dict[type, str] = {
    bool: "booleans are not allowed",
    str: "strings are not allowed",
    bytes: "bytes are not allowed",
    complex: "complex numbers are not allowed",
    type(None): "None is not allowed",
    type(...): "'...' is not allowed",
}
_SNIPPET_LENGTH = 60


class _Evaluator:
    """Walks a parsed expression; recursion is bounded by MAX_DEPTH."""

    def __init__(self, source: str) -> None:
        self.source = source

    def evaluate(self, node: ast.expr, depth: int) -> Number:
        if depth > MAX_DEPTH:
            raise CalculatorError(
                f"expression is nested too deeply (more than {MAX_DEPTH} levels); "
                "simplify it or split it into several calculations"
            )
        if isinstance(node, ast.Constant):
            return self._literal(node)
        if isinstance(node, ast.BinOp):
            return self._binary_chain(node, depth)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node, depth)
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise self._refusal(node)

    def _literal(self, node: ast.Constant) -> Number:
        value = node.value
        if type(value) in (int, float):
            return _checked(value)
        message = _REFUSED_LITERALS.get(type(value), f"{type(value).__name__} is not allowed")
        raise CalculatorError(f"{message}: {self._snippet(node)}")

    def _binary_chain(self, node: ast.BinOp, depth: int) -> Number:
        # Fold a left-leaning chain (1 + 2 + 3 + ...) iteratively, so a long sum of terms
        # counts as one level of nesting rather than one level per operator.
        chain = [node]
        while isinstance(chain[-1].left, ast.BinOp):
            chain.append(chain[-1].left)
        value = self.evaluate(chain[-1].left, depth + 1)
        for link in reversed(chain):
            function = _BINARY_OPERATORS.get(type(link.op))
            if function is None:
                raise CalculatorError(self._operator_refusal(link.op, link))
            right = self.evaluate(link.right, depth + 1)
            try:
                value = _checked(function(value, right))
            except ZeroDivisionError:
                raise CalculatorError("division by zero") from None
            except OverflowError:
                raise CalculatorError(_TOO_LARGE_FLOAT) from None
        return value

    def _unary(self, node: ast.UnaryOp, depth: int) -> Number:
        if isinstance(node.op, ast.Not):
            raise CalculatorError(f"'not' is not allowed: {self._snippet(node)}")
        if not isinstance(node.op, ast.UAdd | ast.USub):
            raise CalculatorError(self._operator_refusal(node.op, node))
        operand = self.evaluate(node.operand, depth + 1)
        return operand if isinstance(node.op, ast.UAdd) else -operand

    def _name(self, node: ast.Name) -> Number:
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if node.id in _FUNCTIONS:
            raise CalculatorError(
                f"'{node.id}' is a function; call it with arguments, e.g. {node.id}(2)"
            )
        raise CalculatorError(
            f"unknown name '{node.id}'; available constants: {', '.join(sorted(_CONSTANTS))}"
        )

    def _call(self, node: ast.Call, depth: int) -> Number:
        if not isinstance(node.func, ast.Name):
            if type(node.func) in _REFUSED_SYNTAX:
                raise self._refusal(node.func)
            raise CalculatorError(
                f"only the listed functions can be called, by plain name: {self._snippet(node)}"
            )
        name = node.func.id
        function = _FUNCTIONS.get(name)
        if function is None:
            if name in _CONSTANTS:
                raise CalculatorError(f"'{name}' is a constant, not a function")
            raise CalculatorError(
                f"unknown function '{name}'; available functions: {', '.join(sorted(_FUNCTIONS))}"
            )
        if any(kw.arg is None for kw in node.keywords) or any(
            isinstance(arg, ast.Starred) for arg in node.args
        ):
            raise CalculatorError(
                f"*args and **kwargs are not allowed; pass arguments positionally: "
                f"{self._snippet(node)}"
            )
        if node.keywords:
            raise CalculatorError(
                f"keyword arguments are not allowed; pass arguments positionally: "
                f"{self._snippet(node)}"
            )
        arity_error = function.arity_error(name, len(node.args))
        if arity_error:
            raise CalculatorError(arity_error)
        args = [self.evaluate(arg, depth + 1) for arg in node.args]
        try:
            return _checked(function.implementation(*args))
        except CalculatorError:
            raise
        except ZeroDivisionError:
            raise CalculatorError(f"division by zero in {name}()") from None
        except OverflowError:
            raise CalculatorError(f"{name}(): {_TOO_LARGE_FLOAT}") from None
        except ValueError:
            raise CalculatorError(
                f"{name}() is not defined for this argument (math domain error): "
                f"{self._snippet(node)}"
            ) from None

    def _operator_refusal(self, op: ast.AST, node: ast.AST) -> str:
        symbol = _REFUSED_OPERATOR_SYMBOLS.get(type(op), type(op).__name__)
        return (
            f"operator '{symbol}' is not allowed (allowed: {_ALLOWED_OPERATORS}): "
            f"{self._snippet(node)}"
        )

    def _refusal(self, node: ast.AST) -> CalculatorError:
        message = _REFUSED_SYNTAX.get(type(node), f"{type(node).__name__} is not allowed")
        return CalculatorError(f"{message}: {self._snippet(node)}")

    def _snippet(self, node: ast.AST) -> str:
        text = ast.get_source_segment(self.source, node) or type(node).__name__
        if len(text) > _SNIPPET_LENGTH:
            text = text[: _SNIPPET_LENGTH - 3] + "..."
        return repr(text)
