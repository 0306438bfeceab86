"""The rules of a tenant's model price, without Django: which price tables there are and
what a price may be. `providers.models.ModelPrice.clean` and the configuration compiler
(`agents/runtime/config/compiler.py`) both ask these, so a form, REST and a document agree."""

from __future__ import annotations

from typing import Any

from providers.runtime.presets import PRESETS

# Anthropic, then each OpenAI-compatible service by its preset (a connection's price kind).
PRICE_KINDS: list[tuple[str, str]] = [("anthropic", "Anthropic")] + [
    (p.name, p.label) for p in PRESETS.values()
]
MAX_PRICE = 10_000  # US dollars per million tokens: above any list price, below a typo's
PRICE_FIELDS = ("input_price", "output_price", "cached_input_price", "cache_write_price")


def price_refusal(value: Any) -> str | None:
    """Why a price (US dollars per million tokens) is refused, or None."""
    if value < 0:
        return "A price cannot be negative."
    if value > MAX_PRICE:
        return f"At most {MAX_PRICE} US dollars per million tokens."
    return None


def model_refusal(model: Any) -> str | None:
    if not isinstance(model, str) or not model.strip():
        return "Name the model, or the beginning of its id."
    return None


def is_price_kind(name: str) -> bool:
    return name in dict(PRICE_KINDS)
