"""The forms a secret may come back in, and one matcher that masks them all.

A service that echoes its credential (a debug answer, an error quoting the request), a
remote agent or a model may echo it transformed. Each secret of at least
MIN_DERIVED_CHARS characters is masked in these forms, and in the same forms of the secret
reversed (by characters):

- as it is and in ROT13, in any letter case;
- hex (any case): bare, `%XX` per byte, `\\xXX` per byte, and the bare hex reversed;
- percent-encoded as `quote(s, safe="")`, `quote(s)` and `quote_plus(s)` write it (any case);
- base64, standard and URL-safe, padded or not, alone or inside a longer encoded value
  (HTTP Basic's `user:secret`): base64 turns 3 bytes into 4 characters, so the secret
  starts at one of 3 alignments, and for each the run of characters that the secret's bytes
  alone decide is matched wherever it occurs (at most one character each side, a few bits
  of its first and last byte, stays visible); that run reversed; the standard one
  percent-encoded; and base64 of the secret's base64.

A shorter secret is masked as it is only (its derived forms would be short enough to occur
by chance). The forms are computed once per accessor (a tenant's tools, a run: see
tools/runtime/context.py) and compiled into RE2 automata: masking a text takes time linear
in its length, for any number of secrets, and never backtracks.
"""

from __future__ import annotations

import base64
import codecs
from collections.abc import Iterable, Sequence
from urllib.parse import quote, quote_plus

from re2 import _re2

MIN_DERIVED_CHARS = 8
# Per automaton (about 5 secrets): more forms make more automata. Larger ones outgrow
# max_mem's lazily built DFA and fall back to a slower, still linear, NFA.
MAX_PATTERN_BYTES = 16_000
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_OPTIONS = _re2.RE2.Options()
_OPTIONS.encoding = _re2.RE2.Options.Encoding.LATIN1  # bytes: texts are matched as UTF-8
_OPTIONS.longest_match = True  # of the forms matching at one place, the longest
_OPTIONS.never_capture = True
_OPTIONS.log_errors = False
_OPTIONS.max_mem = 16 << 20  # a cap: the DFA grows as texts need it
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED


def echoed_forms(secret: str) -> tuple[set[bytes], set[bytes]]:
    """(exact, any_case): the UTF-8 byte strings to mask for `secret`; those in `any_case`
    match whatever the case of their ASCII letters."""
    raw = _utf8(secret)
    if len(secret) < MIN_DERIVED_CHARS:
        return {raw}, set()
    exact: set[bytes] = set()
    any_case: set[bytes] = set()
    for text in (secret, secret[::-1]):
        data = _utf8(text)
        pairs = [f"{byte:02x}".encode() for byte in data]
        hexed = b"".join(pairs)
        any_case |= {
            data,
            _utf8(text.upper()),  # (ASCII letters match in any case; these, the others)
            _utf8(text.lower()),
            _utf8(codecs.encode(text, "rot13")),
            hexed,
            hexed[::-1],
            b"".join(b"%" + pair for pair in pairs),
            b"".join(b"\\x" + pair for pair in pairs),
            quote(data, safe="").encode(),
            quote(data).encode(),
            quote_plus(data).encode(),
        }
        for core in base64_cores(data):
            exact |= {core, core[::-1], quote(core, safe="").encode()}
        exact |= base64_cores(base64.b64encode(data).rstrip(b"="))
    return exact - any_case, any_case


def base64_cores(data: bytes) -> set[bytes]:
    """For each of the 3 alignments `data` can have in a base64 text (standard and
    URL-safe alphabets), the characters only `data`'s bits decide: one of them occurs in the
    base64 of any bytes containing `data`."""
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data + bytes(2))
        start = -(-8 * offset // 6)  # the first character with no bit of the bytes before
        end = 8 * (offset + len(data)) // 6  # past the last with no bit of the bytes after
        core = encoded[start:end]
        cores |= {core, core.translate(_URLSAFE)}
    return cores


class FormMatcher:
    """Finds every form of a set of secrets in UTF-8 text. Compiled on first use."""

    def __init__(self, secrets: Iterable[str]) -> None:
        exact: set[bytes] = set()
        any_case: set[bytes] = set()
        for secret in filter(None, secrets):
            more_exact, more_any_case = echoed_forms(secret)
            exact |= more_exact
            any_case |= more_any_case
        forms = [(form, False) for form in exact - any_case] + [(f, True) for f in any_case]
        forms.sort(key=lambda item: (-len(item[0]), item))  # where two match, the longer
        self._patterns = _patterns(forms)
        self.shortest = min((len(form) for form, _ in forms), default=0)  # bytes
        self._automata: list[_re2.RE2] | None = None

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def spans(self, data: bytes, *, first: bool = False) -> list[tuple[int, int]]:
        """Where forms occur in `data` (only the first place found, if `first`): one pass
        per automaton (one per few secrets)."""
        automata = self._automata
        if automata is None:
            automata = self._automata = [_compiled(pattern) for pattern in self._patterns]
        found = []
        for automaton in automata:
            position, end = 0, len(data)
            while position < end:
                (start, stop), *_ = automaton.Match(_UNANCHORED, data, position, end)
                if start < 0:
                    break
                found.append((start, stop))
                if first:
                    return found
                position = stop
        return found


def occur_in(texts: Sequence[str], matchers: Sequence[FormMatcher]) -> bool:
    """Whether a form may occur in any of `texts`: one pass over them all per automaton (a
    form spanning two of them says yes too; `masked` then finds none)."""
    shortest = min((m.shortest for m in matchers if m), default=0)
    data = _utf8("\n".join(texts))
    if not shortest or len(data) < shortest:  # (a text.delta event, most often)
        return False
    return any(matcher.spans(data, first=True) for matcher in matchers if matcher)


def masked(text: str, matchers: Sequence[FormMatcher], mask: str) -> str:
    """`text` with every place a form of the matchers' secrets occurs replaced by `mask`
    (overlapping places as one). Linear in the length of `text`."""
    shortest = min((m.shortest for m in matchers if m), default=0)
    data = _utf8(text)
    if not shortest or len(data) < shortest:
        return text
    found = sorted(span for matcher in matchers if matcher for span in matcher.spans(data))
    if not found:
        return text
    pieces, position = [], 0
    for start, stop in found:
        if stop <= position:
            continue
        if start >= position:
            pieces += [data[position:start], mask.encode()]
        position = stop
    pieces.append(data[position:])
    return b"".join(pieces).decode("utf-8", "surrogatepass")


def _patterns(forms: list[tuple[bytes, bool]]) -> list[bytes]:
    """The forms as alternations of literals, cut so that no pattern passes
    MAX_PATTERN_BYTES."""
    patterns: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for form, any_case in forms:
        literal = _literal(form, any_case)
        if current and size + len(literal) > MAX_PATTERN_BYTES:
            patterns.append(b"|".join(current))
            current, size = [], 0
        current.append(literal)
        size += len(literal) + 1
    if current:
        patterns.append(b"|".join(current))
    return patterns


def _literal(form: bytes, any_case: bool) -> bytes:
    """`form` as an RE2 pattern matching exactly its bytes (ASCII letters in either case
    when `any_case`)."""
    parts = []
    for byte in form:
        char = chr(byte)
        if any_case and char.isascii() and char.isalpha():
            parts.append(f"[{char.lower()}{char.upper()}]")
        elif char.isascii() and char.isalnum():
            parts.append(char)
        else:
            parts.append(f"\\x{byte:02x}")
    return "".join(parts).encode()


def _compiled(pattern: bytes) -> _re2.RE2:
    automaton = _re2.RE2(pattern, _OPTIONS)
    if not automaton.ok():  # (only past max_mem: the patterns are escaped literals)
        raise RuntimeError(f"secret forms could not be compiled: {automaton.error()}")
    return automaton


def _utf8(text: str) -> bytes:
    # Lone surrogates, which JSON can carry, are kept rather than refused.
    return text.encode("utf-8", "surrogatepass")
