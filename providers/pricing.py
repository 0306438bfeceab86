"""What model tokens cost: the built-in price table, a tenant's overrides (ModelPrice), and
the cost of a usage.

A price applies to every model whose id begins with its model name; the longest matching
name wins, so dated ids (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`) take their
family's price and `gpt-4o-mini` is not priced as `gpt-4o`. A tenant's entry replaces the
built-in entry of the same name and joins the same contest, so overriding `gpt-4o` leaves
`gpt-4o-mini` at its own price.

Token counts follow providers.runtime.types.Usage: `input_tokens` excludes cache reads and
writes (the adapters subtract OpenAI's cached tokens), so the four counts are disjoint.

`price_for` costs no database query while the tenant's prices are unchanged: each process
keeps them per tenant under a version in Redis (base.versions), which every change
to a ModelPrice bumps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

import redis
from django.conf import settings
from django.db.models.signals import post_delete, post_save
from django.db.transaction import on_commit
from django.dispatch import receiver

from base import versions
from providers.models import ModelPrice
from providers.runtime.types import Usage

logger = logging.getLogger(__name__)
MILLION = Decimal(1_000_000)
MICRO_DOLLAR = Decimal("0.000001")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: Decimal
    output: Decimal
    cached_input: Decimal
    cache_write: Decimal


def _p(input: str, output: str, cached: str | None = None, write: str | None = None) -> Price:
    """A price from its list figures; cached input defaults to the input price (no discount
    published) and so does a cache write (billed as input by all but Anthropic)."""
    return Price(Decimal(input), Decimal(output), Decimal(cached or input), Decimal(write or input))


# The providers' published list prices (standard tier, no batch discount, the lowest
# context tier), from their pricing pages as we knew them in 2025 (OpenAI
# openai.com/api/pricing, Anthropic anthropic.com/pricing, Google ai.google.dev/pricing,
# xAI docs.x.ai, Mistral mistral.ai/pricing, DeepSeek api-docs.deepseek.com, Groq
# groq.com/pricing; checked 2025-09). Prices change: a tenant overrides any of them on the
# Prices page, and a model missing here costs nothing until priced. Local servers
# (Ollama, vLLM, LM Studio, custom) have no list prices.
DEFAULT_PRICES: dict[str, dict[str, Price]] = {
    "openai": {
        "gpt-5": _p("1.25", "10", "0.125"),
        "gpt-5-mini": _p("0.25", "2", "0.025"),
        "gpt-5-nano": _p("0.05", "0.40", "0.005"),
        "gpt-4.1": _p("2", "8", "0.50"),
        "gpt-4.1-mini": _p("0.40", "1.60", "0.10"),
        "gpt-4.1-nano": _p("0.10", "0.40", "0.025"),
        "gpt-4.5": _p("75", "150", "37.50"),
        "gpt-4o": _p("2.50", "10", "1.25"),
        "gpt-4o-mini": _p("0.15", "0.60", "0.075"),
        "gpt-4-turbo": _p("10", "30"),
        "gpt-4": _p("30", "60"),
        "gpt-3.5-turbo": _p("0.50", "1.50"),
        "o1": _p("15", "60", "7.50"),
        "o1-mini": _p("1.10", "4.40", "0.55"),
        "o3": _p("2", "8", "0.50"),
        "o3-mini": _p("1.10", "4.40", "0.55"),
        "o4-mini": _p("1.10", "4.40", "0.275"),
        "text-embedding-3-small": _p("0.02", "0"),
        "text-embedding-3-large": _p("0.13", "0"),
        "text-embedding-ada-002": _p("0.10", "0"),
    },
    "anthropic": {
        "claude-opus-4-5": _p("5", "25", "0.50", "6.25"),
        "claude-opus-4": _p("15", "75", "1.50", "18.75"),  # and 4.1
        "claude-sonnet-4": _p("3", "15", "0.30", "3.75"),  # and 4.5
        "claude-haiku-4-5": _p("1", "5", "0.10", "1.25"),
        "claude-3-7-sonnet": _p("3", "15", "0.30", "3.75"),
        "claude-3-5-sonnet": _p("3", "15", "0.30", "3.75"),
        "claude-3-5-haiku": _p("0.80", "4", "0.08", "1"),
        "claude-3-opus": _p("15", "75", "1.50", "18.75"),
        "claude-3-haiku": _p("0.25", "1.25", "0.03", "0.30"),
    },
    "gemini": {
        "gemini-2.5-pro": _p("1.25", "10", "0.125"),
        "gemini-2.5-flash": _p("0.30", "2.50", "0.03"),
        "gemini-2.5-flash-lite": _p("0.10", "0.40", "0.01"),
        "gemini-2.0-flash": _p("0.10", "0.40", "0.025"),
        "gemini-2.0-flash-lite": _p("0.075", "0.30"),
    },
    "xai": {
        "grok-4": _p("3", "15", "0.75"),
        "grok-4-fast": _p("0.20", "0.50", "0.05"),
        "grok-3": _p("3", "15", "0.75"),
        "grok-3-mini": _p("0.30", "0.50", "0.075"),
    },
    "mistral": {
        "mistral-large": _p("2", "6"),
        "mistral-medium": _p("0.40", "2"),
        "mistral-small": _p("0.10", "0.30"),
        "codestral": _p("0.30", "0.90"),
        "ministral-8b": _p("0.10", "0.10"),
        "open-mistral-nemo": _p("0.15", "0.15"),
        "mistral-embed": _p("0.10", "0"),
    },
    "deepseek": {
        "deepseek-chat": _p("0.27", "1.10", "0.07"),
        "deepseek-reasoner": _p("0.55", "2.19", "0.14"),
    },
    "groq": {
        "llama-3.3-70b-versatile": _p("0.59", "0.79"),
        "llama-3.1-8b-instant": _p("0.05", "0.08"),
    },
}

# OpenRouter names models `<vendor>/<model>` and charges the vendor's price: without an
# entry of its own, such a model takes the vendor's table's price.
_OPENROUTER_VENDORS = {
    "openai": "openai", "anthropic": "anthropic", "google": "gemini", "x-ai": "xai",
    "mistralai": "mistral", "deepseek": "deepseek",
}  # fmt: skip


def price_kind(provider: str) -> str:
    """The price table of a run's recorded provider: "openai_compatible:xai" -> "xai"."""
    family, _, preset = provider.partition(":")
    if family == "openai_compatible":
        return preset or "custom"
    return provider


def _longest_prefix(table: Mapping[str, Price], model: str) -> Price | None:
    best = max((name for name in table if model.startswith(name)), key=len, default=None)
    return table[best] if best is not None else None


# -- a tenant's prices, per process ------------------------------------------------------------
_cache: dict[int, tuple[str, dict[str, dict[str, Price]]]] = {}
_lock = threading.Lock()


def _version_key(tenant_id: int) -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    return f"{prefix}:prices:version:{tenant_id}"


def tenant_tables(tenant_id: int) -> dict[str, dict[str, Price]]:
    """Per price kind, the built-in table with the tenant's entries over it. A Redis read
    (usually none: versions mirrors it) while unchanged; one query when changed."""
    try:
        version = versions.current(_version_key(tenant_id))
    except (redis.RedisError, OSError):  # pricing never stops a run's record: ask the database
        logger.warning("prices of tenant %s read without the cache", tenant_id, exc_info=True)
        return _tables(tenant_id)
    kept = _cache.get(tenant_id)
    if kept is not None and kept[0] == version:
        return kept[1]
    tables = _tables(tenant_id)
    with _lock:
        _cache[tenant_id] = (version, tables)
    return tables


def _tables(tenant_id: int) -> dict[str, dict[str, Price]]:
    """One query."""
    tables = {kind: dict(table) for kind, table in DEFAULT_PRICES.items()}
    for row in ModelPrice.objects.filter(tenant_id=tenant_id):
        tables.setdefault(row.provider_kind, {})[row.model] = Price(
            row.input_price, row.output_price, row.cached_input_price, row.cache_write_price
        )
    return tables


def price_for(tenant_id: int | None, provider_kind: str, model: str) -> Price | None:
    """The price of `model` on `provider_kind` (a price kind, or a run's recorded provider)
    for the tenant (None: the built-in table only): its own entry, else the built-in one;
    None when neither names it.
    Synchronous (it may query): from async code, through sync_to_async."""
    if not model:
        return None
    kind = price_kind(provider_kind)
    tables = DEFAULT_PRICES if tenant_id is None else tenant_tables(int(tenant_id))
    found = _longest_prefix(tables.get(kind, {}), model)
    if found is None and kind == "openrouter":
        vendor, slash, name = model.partition("/")
        if slash and vendor in _OPENROUTER_VENDORS:
            found = _longest_prefix(tables.get(_OPENROUTER_VENDORS[vendor], {}), name)
    return found


def cost_of(
    price: Price | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Decimal:
    """US dollars, to the millionth; 0 when there is no price."""
    if price is None:
        return Decimal(0).quantize(MICRO_DOLLAR)
    total = (
        price.input * input_tokens
        + price.output * output_tokens
        + price.cached_input * cache_read_tokens
        + price.cache_write * cache_write_tokens
    )
    return (total / MILLION).quantize(MICRO_DOLLAR, rounding=ROUND_HALF_UP)


def usage_cost(tenant_id: int, provider: str, model: str, usage: Usage) -> Decimal:
    """What `usage` of `model` on `provider` (a run's recorded provider, or a price kind)
    cost the tenant, in US dollars: as price_for (synchronous) and cost_of."""
    return cost_of(
        price_for(tenant_id, provider, model),
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    )


@dataclass(frozen=True)
class PriceRow:
    """One line of a tenant's price table: a built-in entry, its own, or both."""

    provider_kind: str
    model: str
    price: Price  # the one that applies
    built_in: Price | None
    own: ModelPrice | None


def price_rows(tenant_id: int) -> list[PriceRow]:
    """The tenant's table as its Prices page lists it: every built-in entry and every one
    of its own, by provider kind and model. One query."""
    own = {(p.provider_kind, p.model): p for p in ModelPrice.objects.filter(tenant_id=tenant_id)}
    keys = {(kind, model) for kind, table in DEFAULT_PRICES.items() for model in table}
    rows = []
    for kind, model in sorted(keys | set(own)):
        built_in = DEFAULT_PRICES.get(kind, {}).get(model)
        row = own.get((kind, model))
        price = built_in if row is None else Price(
            row.input_price, row.output_price, row.cached_input_price, row.cache_write_price
        )  # fmt: skip
        rows.append(PriceRow(kind, model, price, built_in, row))
    return rows


def prices_changed(tenant_id: int) -> None:
    versions.bump(_version_key(tenant_id))


@receiver([post_save, post_delete], sender=ModelPrice)
def _price_changed(sender, instance: ModelPrice, **kwargs) -> None:
    # Now (this process, this transaction) and after commit (a process that rebuilt from
    # not-yet-committed data builds again).
    tenant_id = instance.tenant_id
    prices_changed(tenant_id)
    on_commit(lambda: prices_changed(tenant_id))
