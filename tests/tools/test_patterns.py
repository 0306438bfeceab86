"""Tenant-written patterns run on RE2: linear time, and what RE2 cannot run is refused."""

from __future__ import annotations

import time

import pytest

from tools.runtime.patterns import PatternError, compile_pattern

CATASTROPHIC = "^(a+)+$"  # Python's re: 5.9 s for 28 characters, doubling per character


def cpu_seconds(action) -> float:
    """CPU time of this thread (not wall clock: the test machine is shared)."""
    started = time.thread_time()
    action()
    return time.thread_time() - started


@pytest.mark.parametrize("length", [26, 100_000])
def test_a_catastrophic_pattern_is_matched_in_linear_time(length):
    matches = compile_pattern(CATASTROPHIC)
    text = "a" * length + "!"
    assert cpu_seconds(lambda: matches(text)) < 0.05
    assert not matches(text) and matches("a" * length)


@pytest.mark.parametrize(
    "pattern", [r"(a)\1", r"^(?=.*\d)", r"(?!x)", r"(?<=a)b", r"(?<!a)b", "a{5000}", "x" * 1001]
)
def test_patterns_re2_cannot_run_are_refused_with_a_reason(pattern):
    with pytest.raises(PatternError, match=r"not supported|longer than"):
        compile_pattern(pattern)


def test_json_schema_semantics_unicode_and_lone_surrogates():
    assert compile_pattern("b")("abc")  # unanchored search, as JSON Schema says
    assert compile_pattern(r"^\p{L}+$")("Grüße")  # Unicode classes work (Python's re has none)
    assert not compile_pattern(r"^\d$")("٣")  # \d is ASCII, as in ECMA-262
    assert not compile_pattern("^a$")("a\n")  # $ is the end of the text
    assert compile_pattern("^.$")("\ud800")  # JSON may carry a lone surrogate: no exception
