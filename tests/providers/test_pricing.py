"""The price table: built-in prices by longest prefix, a tenant's overrides (its own only),
the cost of a usage, and the per-process cache following changes."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from providers.models import ModelPrice
from providers.pricing import DEFAULT_PRICES, Price, cost_of, price_for, price_kind

pytestmark = pytest.mark.django_db


def override(tenant, kind: str, model: str, *prices: str) -> ModelPrice:
    inp, out, cached, write = (Decimal(p) for p in prices)
    return ModelPrice.objects.create(
        tenant=tenant, provider_kind=kind, model=model, input_price=inp, output_price=out,
        cached_input_price=cached, cache_write_price=write,
    )  # fmt: skip


def test_a_dated_model_id_takes_its_familys_default_price(trio):
    assert (
        price_for(trio.acme.pk, "openai", "gpt-4o-2024-08-06") == DEFAULT_PRICES["openai"]["gpt-4o"]
    )
    sonnet = price_for(trio.acme.pk, "anthropic", "claude-sonnet-4-5-20250929")
    assert sonnet == DEFAULT_PRICES["anthropic"]["claude-sonnet-4"]


def test_the_longest_prefix_wins(trio):
    mini = price_for(trio.acme.pk, "openai", "gpt-4o-mini-2024-07-18")
    assert mini == DEFAULT_PRICES["openai"]["gpt-4o-mini"] != DEFAULT_PRICES["openai"]["gpt-4o"]
    assert price_for(trio.acme.pk, "anthropic", "claude-opus-4-5-x").input == Decimal(5)
    assert price_for(trio.acme.pk, "anthropic", "claude-opus-4-1").input == Decimal(15)


def test_unknown_models_and_kinds_have_no_price(trio):
    assert price_for(trio.acme.pk, "openai", "my-finetune") is None
    assert price_for(trio.acme.pk, "fake", "gpt-4o") is None
    assert price_for(trio.acme.pk, "openai", "") is None


def test_a_runs_recorded_provider_names_its_preset_table(trio):
    assert price_kind("openai_compatible:xai") == "xai"
    assert price_for(trio.acme.pk, "openai_compatible:xai", "grok-3-mini").output == Decimal("0.50")
    # OpenRouter's `<vendor>/<model>` takes the vendor's price
    routed = price_for(trio.acme.pk, "openai_compatible:openrouter", "anthropic/claude-3-5-haiku")
    assert routed == DEFAULT_PRICES["anthropic"]["claude-3-5-haiku"]


def test_a_tenants_override_applies_to_it_alone(trio):
    override(trio.acme, "openai", "gpt-4o", "1", "2", "0.5", "1")
    assert price_for(trio.acme.pk, "openai", "gpt-4o-2024-08-06") == Price(
        Decimal(1), Decimal(2), Decimal("0.5"), Decimal(1)
    )
    # gpt-4o-mini keeps its own (longer) built-in entry
    assert (
        price_for(trio.acme.pk, "openai", "gpt-4o-mini") == DEFAULT_PRICES["openai"]["gpt-4o-mini"]
    )
    # another tenant's override is not visible
    assert price_for(trio.globex.pk, "openai", "gpt-4o") == DEFAULT_PRICES["openai"]["gpt-4o"]


def test_an_override_can_price_a_model_the_table_lacks_and_follows_changes(trio):
    row = override(trio.acme, "vllm", "llama", "0.1", "0.2", "0", "0")
    assert price_for(trio.acme.pk, "openai_compatible:vllm", "llama-3-8b").output == Decimal("0.2")
    row.output_price = Decimal("0.3")
    row.save()
    assert price_for(trio.acme.pk, "openai_compatible:vllm", "llama-3-8b").output == Decimal("0.3")
    row.delete()
    assert price_for(trio.acme.pk, "openai_compatible:vllm", "llama-3-8b") is None


def test_cost_sums_the_four_counts_to_the_millionth():
    price = Price(Decimal(3), Decimal(15), Decimal("0.30"), Decimal("3.75"))
    # 1000*3 + 500*15 + 2000*0.3 + 100*3.75 = 11475 micro-dollars per million
    assert cost_of(price, 1000, 500, 2000, 100) == Decimal("0.011475")
    assert cost_of(price, 1, 0) == Decimal("0.000003")
    assert cost_of(None, 10_000, 10_000) == Decimal("0.000000")


def test_prices_are_checked(trio):
    row = ModelPrice(
        tenant=trio.acme, provider_kind="openai", model=" ", input_price=Decimal(-1),
        output_price=Decimal(20_000), cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    errors = caught.value.message_dict
    assert "cannot be negative" in errors["input_price"][0]
    assert "At most" in errors["output_price"][0]
    assert "model" in errors


def test_a_lookup_costs_no_query_while_the_prices_are_unchanged(trio, django_assert_num_queries):
    override(trio.acme, "openai", "gpt-x", "1", "1", "1", "1")
    price_for(trio.acme.pk, "openai", "gpt-x")  # built once
    with django_assert_num_queries(0):
        assert price_for(trio.acme.pk, "openai", "gpt-x-1").input == 1
        assert price_for(trio.acme.pk, "anthropic", "claude-3-haiku").input == Decimal("0.25")
