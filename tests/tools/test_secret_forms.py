"""A secret echoed transformed is masked like a verbatim one (tools/runtime/secret_forms.py,
through StaticSecrets.redact, which every tool result, event and record passes)."""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import random
import re
from collections.abc import Iterator
from urllib.parse import quote, quote_plus, unquote_to_bytes

import pytest

from tools.runtime.context import REDACTED, StaticSecrets

SECRET = "s3cr3t tool/key+42:ü"  # a space, URL-reserved marks and a non-ASCII letter


def b64(data: str | bytes, *, urlsafe: bool = False, pad: bool = True) -> str:
    raw = data.encode() if isinstance(data, str) else data
    text = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    return text if pad else text.rstrip("=")


def echoes(secret: str) -> dict[str, str]:
    """What a service (or a model) that wants the secret out might send back, cheaply."""
    raw = secret.encode()
    found = {
        "verbatim": secret,
        "upper": secret.upper(),
        "reversed": secret[::-1],
        "rot13": codecs.encode(secret, "rot13"),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "hex reversed": raw.hex()[::-1],
        "hex of reversed": secret[::-1].encode().hex(),
        "%XX": "".join(f"%{b:02X}" for b in raw),
        "%xx": "".join(f"%{b:02x}" for b in raw),
        "\\xXX": "".join(f"\\x{b:02x}" for b in raw),
        "quote": quote(secret),
        "quote safe=''": quote(secret, safe=""),
        "quote_plus": quote_plus(secret),
        "base64": b64(secret),
        "base64 unpadded": b64(secret, pad=False),
        "base64 url-safe": b64(secret, urlsafe=True),
        "base64 url-safe unpadded": b64(secret, urlsafe=True, pad=False),
        "base64 reversed": b64(secret)[::-1],
        "base64 of reversed": b64(secret[::-1]),
        "base64 percent-encoded": quote(b64(secret), safe=""),
        "base64 of base64": b64(b64(secret)),
    }
    # Inside a longer encoded value, at each of base64's three alignments (and after).
    for user in ("", "a", "ab", "abc", "svc-account"):
        found[f"basic {user!r}"] = b64(f"{user}:{secret}")
        found[f"basic {user!r} url-safe"] = b64(f"{user}:{secret}", urlsafe=True, pad=False)
        found[f"{user!r} before and after"] = b64(f"{user}{secret}{user}")
    return found


def readings(piece: str, depth: int = 2) -> Iterator[bytes]:
    """Every reading of `piece` an attacker would try: as it is, reversed, ROT13,
    percent-decoded, each run of hex digits, each run of base64 characters at each alignment
    (both alphabets), and the readings of those (`depth` levels of base64)."""
    for text in (piece, piece[::-1]):
        raw = text.encode("utf-8", "surrogatepass")
        yield from (raw, codecs.encode(text, "rot13").encode("utf-8", "surrogatepass"))
        yield from (unquote_to_bytes(raw), unquote_to_bytes(raw.replace(b"+", b" ")))
        for run in [*re.findall(r"[0-9a-fA-F]+", text), "".join(re.findall(r"[0-9a-fA-F]", text))]:
            for shift in range(2):
                chunk = run[shift:]
                yield bytes.fromhex(chunk[: len(chunk) - len(chunk) % 2])
        for run in re.findall(r"[A-Za-z0-9+/_-]{4,}", text):
            for shift in range(4):
                chunk = run[shift:]
                chunk = chunk[: len(chunk) - len(chunk) % 4]
                for alt in (b"+/", b"-_"):
                    with contextlib.suppress(binascii.Error, ValueError):
                        decoded = base64.b64decode(chunk.encode(), altchars=alt)
                        yield decoded
                        if depth > 1:
                            yield from readings(decoded.decode("latin-1"), depth - 1)


def recoverable(secret: str, text: str, window: int = 4) -> set[bytes]:
    """The `window`-byte runs of `secret` (either way round, in any case) that some reading
    of what is left of `text` between its masks gives back."""
    raw = secret.encode().lower()
    runs = {raw[i : i + window] for i in range(len(raw) - window + 1)}
    runs |= {run[::-1] for run in runs}
    found = set()
    for piece in text.split(REDACTED):
        for decoded in readings(piece):
            low = decoded.lower()
            found |= {run for run in runs if run in low}
    return found


@pytest.mark.parametrize(("name", "echo"), echoes(SECRET).items(), ids=list(echoes(SECRET)))
def test_each_form_of_a_secret_is_masked(name, echo):
    secrets = StaticSecrets({"tool:a": SECRET})
    text = f"The service said: {echo} (as {name})."
    shown = secrets.redact(text)
    assert echo not in shown and REDACTED in shown
    assert recoverable(SECRET, shown) == set()
    assert shown.startswith("The service said: ") and shown.endswith(f" (as {name}).")
    # Found in structured results too: in keys, values and lists.
    assert recoverable(SECRET, str(secrets.redact({echo: [echo, {"v": echo}]}))) == set()


@pytest.mark.parametrize(("name", "echo"), echoes(SECRET).items(), ids=list(echoes(SECRET)))
def test_the_check_sees_each_form_unmasked(name, echo):
    assert recoverable(SECRET, f"The service said: {echo} (as {name}).")


def test_random_secrets_and_surroundings():
    rng = random.Random(33)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~+/=: "
    for _ in range(15):
        secret = "".join(rng.choice(alphabet) for _ in range(rng.randint(8, 60)))
        secrets = StaticSecrets({"a": secret, "b": "other-secret-" + secret[:3]})
        for name, echo in echoes(secret).items():
            before = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
            shown = secrets.redact(f"{before}{echo}!")
            assert recoverable(secret, shown) == set(), (secret, name, echo, shown)


def test_texts_without_a_secret_are_left_alone():
    secrets = StaticSecrets({"a": SECRET, "b": "another-long-credential"})
    text = "Nothing to hide here: c2VjcmV0 736563726574 %73%65 ü " * 50
    assert secrets.redact(text) is text
    assert secrets.redact({"n": 1, "items": [None, True, 2.5]}) == {
        "n": 1,
        "items": [None, True, 2.5],
    }


def test_a_short_secret_is_masked_only_as_it_is():
    secrets = StaticSecrets({"pin": "Ab12"})
    assert secrets.redact("pin Ab12 / AB12 / QWIxMg==") == f"pin {REDACTED} / AB12 / QWIxMg=="


def test_the_longest_of_overlapping_secrets_is_masked_whole():
    inner = "inner-secret-value"
    outer = f"outer-{inner}-wrapper"
    for secrets in (
        StaticSecrets({"a": inner, "b": outer}),
        StaticSecrets({"a": inner}).with_values({"b": outer}),  # in another automaton
        StaticSecrets({"b": outer}).with_values({"a": inner}),
    ):
        assert secrets.redact(f"<{outer}> <{inner}>") == f"<{REDACTED}> <{REDACTED}>"
        assert recoverable(outer, secrets.redact(f"<{b64(outer)}>")) == set()


def test_lone_surrogates_and_many_secrets():
    many = {f"k{i}": f"credential-number-{i:04d}-xyz" for i in range(60)}
    secrets = StaticSecrets(many)  # (in several automata)
    text = "\ud800 " + " ".join(b64(f"u{i}:{v}") for i, v in enumerate(many.values())) + " \udfff"
    shown = secrets.redact(text).split(" ")
    assert shown[0] == "\ud800" and shown[-1] == "\udfff"
    assert all(
        recoverable(v, piece) == set() for v, piece in zip(many.values(), shown[1:-1], strict=True)
    )


def test_a_run_adding_the_same_key_shares_its_compiled_forms_and_another_key_gets_its_own():
    """StaticSecrets.with_values keeps what it made: each run adds its connection's key to
    its tenant's secrets, and that key's forms are compiled once, not per run."""
    tenant = StaticSecrets({"tool:token": "tool-secret-0123456789"})
    first = tenant.with_values({"provider:api_key": "sk-provider-key-0123456789"})
    again = tenant.with_values({"provider:api_key": "sk-provider-key-0123456789"})
    other = tenant.with_values({"provider:api_key": "sk-another-key-9876543210"})
    assert again is first and other is not first
    assert other.redact("sk-provider-key-0123456789") == "sk-provider-key-0123456789"
    assert other.redact("sk-another-key-9876543210 tool-secret-0123456789") == (
        f"{REDACTED} {REDACTED}"
    )
