"""Tenant-written regular expressions (JSON Schema `pattern`, `patternProperties`).

They are matched by RE2 (google-re2), whose time is linear in the text: no pattern and no
argument can backtrack, so a match never freezes the event loop (Python's `re` took 5.9 s
for `^(a+)+$` against 28 characters, doubling with each one). RE2 has no backreferences
and no lookaround; such patterns are refused with PatternError when a schema is saved.
RE2's `\\d`, `\\w` and `$` are ASCII / end-of-text, as in JSON Schema's ECMA-262 dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import re2
from re2 import _re2

MAX_PATTERN_CHARS = 1000
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern to stderr
_OPTIONS.never_capture = True  # only "does it match?" is asked: no group bookkeeping
_OPTIONS.max_mem = 2 << 20  # bytes per compiled pattern; a larger one is refused

Search = Callable[[str], bool]


class PatternError(ValueError):
    """The pattern cannot be used here; the message says why, for the tenant admin."""


@lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> Search:
    """A function telling whether a text contains a match of `pattern` (JSON Schema's
    unanchored semantics). Compiling costs microseconds to a millisecond; kept per pattern."""
    if not isinstance(pattern, str):
        raise PatternError("a pattern must be a string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        # The binding the `re2` module wraps: its `search` builds a match object per call
        # (about 1 µs more on the fast path, for a yes/no answer). Pinned below 2.
        compiled = _re2.RE2(pattern.encode("utf-8", "surrogatepass"), _OPTIONS)
        if not compiled.ok():
            raise re2.error(compiled.error())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else ""
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(
            f"pattern {shown(pattern)} is not supported ({reason}); patterns are matched by "
            "RE2: no backreferences (\\1) and no lookaround ((?=, (?!, (?<=, (?<!)"
        ) from None
    match, unanchored = compiled.Match, _re2.RE2.Anchor.UNANCHORED

    def matches(text: str) -> bool:
        # Lone surrogates, which JSON can carry, are passed through rather than refused.
        data = text.encode("utf-8", "surrogatepass")
        return match(unanchored, data, 0, len(data))[0][0] >= 0  # (-1, -1): no match

    return matches


def shown(pattern: str, limit: int = 80) -> str:
    """`pattern` quoted for a message, cut at `limit` characters."""
    return repr(pattern if len(pattern) <= limit else pattern[:limit] + "…")
