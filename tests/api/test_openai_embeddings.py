"""`/v1/embeddings` through a tenant's connection (the fake provider's embeddings) and the
local model, driven by the real `openai` SDK against a live server."""

from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from agents import quotas
from agents.models import Quota, Run
from providers.models import ModelPrice
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.fakes.provider_server import embedding_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "local-openai/text-embedding-3-small"  # the `connection` fixture's "Local OpenAI"


def test_embeddings_through_a_connection_are_counted_per_key(
    trio, connection, asgi_server, keys, provider_server
):
    client = sdk(asgi_server, keys["run"])
    result = client.embeddings.create(model=MODEL, input=["first", "second"])  # (SDK: base64)
    assert [item.index for item in result.data] == [0, 1]
    assert result.data[1].embedding == pytest.approx(embedding_for("second"))
    floats = client.embeddings.create(model=MODEL, input="first", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(embedding_for("first"))
    sent = provider_server.requests_to("/v1/embeddings")[-1].body
    assert sent["model"] == "text-embedding-3-small" and sent["input"] == ["first"]
    runs = Run.objects.filter(gateway_model=MODEL).order_by("pk")
    assert [r.initiated_by_api_key.name for r in runs] == ["chat", "chat"]
    assert runs[0].input_tokens == result.usage.prompt_tokens
    assert runs[0].status == "succeeded" and runs[0].agent is None


def test_unknown_models_bad_inputs_and_agent_limited_keys_are_refused(
    trio, connection, asgi_server, keys
):
    client = sdk(asgi_server, keys["run"])
    for model in ("nope/x", "text-embedding-3-small", "local-openai/"):
        with pytest.raises(openai.NotFoundError) as missing:
            client.embeddings.create(model=model, input="x")
        assert missing.value.code == "model_not_found"
    connection.allowed_models = ["gpt-test"]
    connection.save()
    with pytest.raises(openai.NotFoundError):  # not an allowed model of the connection
        client.embeddings.create(model=MODEL, input="x")
    for bad in ([], [1, 2, 3], [""], "x\x00"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=MODEL, input=bad)
        assert refused.value.param == "input"
    for fields, param, words in (  # the request's shape: agentplatform/v1/shapes/embeddings.py
        ({"input": ["a", "b\x00"]}, "input[1]", "Text may not contain NUL characters."),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format", "`float` or `base64`"),
        ({"input": "x", "dimensions": 0}, "dimensions", "from 1 to 8192"),
        ({"input": "x", "model": ""}, "model", "`model` is required"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(**{"model": MODEL, **fields})
        assert refused.value.param == param and words in refused.value.message
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    with pytest.raises(openai.PermissionDeniedError):
        sdk(asgi_server, limited).embeddings.create(model="local", input="x")
    assert not Run.objects.exists()


def test_an_agent_limited_key_is_refused_a_connections_embeddings(
    trio, asgi_server, provider_server, connection
):
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk(asgi_server, limited).embeddings.create(model=MODEL, input="x")
    assert refused.value.code == "permission_denied"
    assert "only some agents" in refused.value.message
    assert provider_server.requests_to("/v1/embeddings") == []
    assert not Run.objects.exists()


def test_the_local_model_embeds_with_384_dimensions(trio, asgi_server, keys):
    client = sdk(asgi_server, keys["run"]).with_options(timeout=90)  # (the model loads first)
    result = client.embeddings.create(
        model="local", input=["a cat", "a dog"], encoding_format="float"
    )
    assert [len(item.embedding) for item in result.data] == [384, 384]
    assert Run.objects.get(gateway_model="local").input_tokens == result.usage.prompt_tokens > 0


def test_the_static_model_embeds_with_256_dimensions(trio, asgi_server, keys):
    client = sdk(asgi_server, keys["run"])
    result = client.embeddings.create(
        model="static", input=["a cat", "a dog"], encoding_format="float"
    )
    assert [len(item.embedding) for item in result.data] == [256, 256]
    assert Run.objects.get(gateway_model="static").input_tokens == result.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="static", input="x", dimensions=384)
    assert refused.value.param == "dimensions" and "256 dimensions" in refused.value.message


# -- quotas: a connection's embeddings are held against the tenant's and the key's limits ----
def _limit(tenant, limit, **fields):
    fields = {"scope": "tenant", "metric": "tokens", "period": "day", **fields}
    return Quota.objects.create(tenant=tenant, limit=limit, **fields)


def test_a_keys_used_up_limit_refuses_a_connections_embeddings_with_429(
    trio, connection, asgi_server, keys, provider_server
):
    key = trio.acme.api_keys.get(name="chat")
    quota = _limit(trio.acme, 3, scope="api_key", api_key=key)
    client = sdk(asgi_server, keys["run"])
    with pytest.raises(openai.RateLimitError) as refused:  # 5 + 5 estimated tokens > 3
        client.embeddings.create(model=MODEL, input=["a long first text", "and a second one"])
    error = refused.value
    assert error.status_code == 429 and error.code == "quota_exceeded"
    assert error.body["type"] == "insufficient_quota" and error.body["param"] is None
    assert error.body["message"].startswith(
        "Quota exceeded: the daily limit of 3 tokens for API key 'chat' cannot take this call"
    )
    assert int(error.response.headers["Retry-After"]) > 0
    assert provider_server.requests_to("/v1/embeddings") == []
    assert not Run.objects.exists() and quotas.used(quota) == 0
    # (The platform's own models are held too: tests/api/test_builtin_embeddings.py.)


def test_a_connections_embeddings_settle_to_the_recorded_tokens_and_cost(
    trio, connection, asgi_server, keys, provider_server
):
    ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="openai", model="text-embedding-3-small",
        input_price=Decimal("1000"), output_price=Decimal(0),
        cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip
    tokens = _limit(trio.acme, 10_000)
    dollars = _limit(trio.acme, Decimal("1"), metric="cost", period="month")
    result = sdk(asgi_server, keys["run"]).embeddings.create(model=MODEL, input=["first", "second"])
    run = Run.objects.get(gateway_model=MODEL)
    assert quotas.used(tokens) == run.input_tokens == result.usage.prompt_tokens > 0
    assert Decimal(str(quotas.used(dollars))) == run.cost_usd  # at the tenant's price
    assert run.cost_usd == Decimal(run.input_tokens) * 1000 / 1_000_000
