"""Cost recorded on gateway calls and embeddings, through the live server and the real SDK."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from agents.models import Run
from providers.models import ModelPrice
from tests.api.conftest import sdk
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def recorded(model: str) -> Run:
    for _ in range(50):  # written just after the answer, off the request's path
        run = Run.objects.filter(gateway_model=model).order_by("-pk").first()
        if run is not None:
            return run
        time.sleep(0.05)
    raise AssertionError("the gateway call was not recorded")


def test_a_gateway_call_records_its_cost(trio, connection, asgi_server, keys, provider_server):
    ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="openai", model="gpt-test", input_price=Decimal(2),
        output_price=Decimal(8), cached_input_price=Decimal("0.5"), cache_write_price=Decimal(2),
    )  # fmt: skip
    provider_server.script(
        "openai", TextReply("Hi.", input_tokens=1500, output_tokens=250, cache_read_tokens=1000)
    )
    client = sdk(asgi_server, keys["run"])
    client.chat.completions.create(
        model="local-openai/gpt-test", messages=[{"role": "user", "content": "Hi"}]
    )
    run = recorded("local-openai/gpt-test")
    assert (run.input_tokens, run.output_tokens, run.cache_read_tokens) == (500, 250, 1000)
    # 500 x 2 + 250 x 8 + 1000 x 0.5 per million
    assert run.cost_usd == run.total_cost_usd == Decimal("0.003500")


def test_embeddings_cost_their_models_price(trio, connection, asgi_server, keys):
    ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="openai", model="text-embedding-3-small",
        input_price=Decimal(100), output_price=Decimal(0), cached_input_price=Decimal(0),
        cache_write_price=Decimal(0),
    )  # fmt: skip
    client = sdk(asgi_server, keys["run"])
    result = client.embeddings.create(model="local-openai/text-embedding-3-small", input="hi")
    run = recorded("local-openai/text-embedding-3-small")
    assert run.model == "text-embedding-3-small"
    tokens = result.usage.prompt_tokens
    assert tokens > 0 and run.cost_usd == Decimal(100) * tokens / 1_000_000
