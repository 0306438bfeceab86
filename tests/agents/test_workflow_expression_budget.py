"""An expression's work and memory are bounded while it is evaluated, not only its result:
the strings it builds (join, to_string, reverse) and the values it compares count against
the same budget as the nodes it visits and the lists and objects it makes, checked before
a string is built, so a hostile expression fails at once with little memory used."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from agents.runtime.declared_workflows.expressions import ExpressionFailed, parse

pytestmark = pytest.mark.fast


def _fails_fast(source: str, scope: object) -> None:
    expression = parse(source)
    started = time.monotonic()
    with pytest.raises(ExpressionFailed, match=r"budget ran out|too large"):
        expression.evaluate(scope)
    assert time.monotonic() - started < 0.5
    tracemalloc.start()  # (it slows the work, so the time is taken without it)
    try:
        with pytest.raises(ExpressionFailed):
            expression.evaluate(scope)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000  # bytes: a few times the budget, never the value it asked for


def test_joining_a_string_with_itself_again_and_again_fails_quickly() -> None:
    doubling = " | ".join(["join('', [@, @])"] * 60)
    _fails_fast(f"input | {doubling}", {"input": "x" * 100})


def test_to_string_and_reverse_of_a_shared_value_count_what_they_write() -> None:
    doubling = " | ".join(["[@, @]"] * 18)
    _fails_fast(f"input | {doubling} | to_string(@) | [@, @] | join('', @)", {"input": "ab"})
    repeated = " | ".join(["reverse(@)"] * 40)
    _fails_fast(f"input | {repeated}", {"input": "y" * 50_000})


def test_comparing_two_shared_values_counts_what_is_compared() -> None:
    doubling = " | ".join(["[@, @]"] * 60)
    _fails_fast(f"(input | {doubling}) == (input | {doubling})", {"input": "z"})
    _fails_fast(f"contains([input | {doubling}], input | {doubling})", {"input": "z"})


def test_ordinary_strings_are_untouched() -> None:
    scope = {"input": {"words": ["a", "b", "c"], "text": "t" * 400_000}}
    assert parse("join('-', input.words)").evaluate(scope) == "a-b-c"
    assert parse("reverse(join('', input.words))").evaluate(scope) == "cba"
    assert parse("length(input.text)").evaluate(scope) == 400_000  # read, not built
    assert parse("input.words == input.words").evaluate(scope) is True
