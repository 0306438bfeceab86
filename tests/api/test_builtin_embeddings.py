"""The platform's own embedding models on `/v1`: a tenant with no provider connection lists
them on `/v1/models` and embeds with them on `/v1/embeddings` (the vectors its knowledge
bases store), metered like any model. Driven by the real `openai` SDK, in process (an ASGI
transport to the Django app: no server)."""

from __future__ import annotations

import asyncio
import base64
import struct

import httpx2
import openai
import pytest
from django.core.cache import cache

from agentplatform.asgi_handler import StreamingASGIHandler
from agents import quotas
from agents.models import Quota, Run
from base import versions
from rag.embedders import embedder_for, local_embedder, static_embedder
from rag.models import KnowledgeBase
from tenancy import services as tenancy

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = ["The cat sat on the mat.", "Quarterly revenue grew by 12%."]


def call(key: str, method: str, **kwargs):
    """`client.<method>(**kwargs)` of an AsyncOpenAI talking to the app in process."""

    async def go():
        transport = httpx2.ASGITransport(app=StreamingASGIHandler())
        http = httpx2.AsyncClient(transport=transport, base_url="http://testserver")
        async with openai.AsyncOpenAI(
            api_key=key, base_url="http://testserver/v1", http_client=http, max_retries=0
        ) as client:
            target = client
            for part in method.split("."):
                target = getattr(target, part)
            return await target(**kwargs)

    return asyncio.run(go())


def embed(key: str, **kwargs):
    return call(key, "embeddings.create", **kwargs)


def stored_vectors(kind: str, texts: list[str]) -> list[list[float]]:
    """What a knowledge base of `kind` stores for `texts`."""
    return asyncio.run(embedder_for(KnowledgeBase(embedder=kind)).embed(texts))


def test_a_tenant_without_connections_lists_and_uses_the_static_model(trio, keys):
    listed = call(keys["read"], "models.list")
    assert [(m.id, m.owned_by) for m in listed.data] == [
        ("static", "agentplatform"),
        ("local", "agentplatform"),  # (MiniLM is installed here)
    ]
    assert call(keys["read"], "models.retrieve", model="static").id == "static"

    result = embed(keys["run"], model="static", input=TEXTS, encoding_format="float")
    assert result.model == "static" and [d.index for d in result.data] == [0, 1]
    expected = stored_vectors("static", TEXTS)
    for item, vector in zip(result.data, expected, strict=True):
        assert item.embedding == pytest.approx(vector, abs=1e-6)
    # The word pieces the model read, not a guess from the characters.
    assert result.usage.prompt_tokens == static_embedder().count_tokens(TEXTS) == 14
    run = Run.objects.get(gateway_model="static")
    assert run.input_tokens == 14 and run.cost_usd == 0 and run.status == "succeeded"
    assert run.initiated_by_api_key.name == "chat" and run.tenant_id == trio.acme.pk


def test_base64_vectors_are_little_endian_float32(trio, keys):
    raw = embed(keys["run"], model="static", input=TEXTS[0], encoding_format="base64")
    packed = base64.b64decode(raw.data[0].embedding)
    (vector,) = stored_vectors("static", TEXTS[:1])
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == pytest.approx(vector, abs=1e-6)
    decoded = embed(keys["run"], model="static", input=TEXTS[0])  # the SDK asks base64, decodes
    assert decoded.data[0].embedding == pytest.approx(vector, abs=1e-6)


def test_minilm_is_listed_and_embeds_as_a_knowledge_base_does(trio, keys):
    assert "local" in {m.id for m in call(keys["read"], "models.list").data}
    result = embed(keys["run"], model="local", input=TEXTS, encoding_format="float")
    expected = stored_vectors("local", TEXTS)
    for item, vector in zip(result.data, expected, strict=True):
        assert len(item.embedding) == 384
        assert item.embedding == pytest.approx(vector, abs=1e-5)
    run = Run.objects.get(gateway_model="local")
    assert result.usage.prompt_tokens == local_embedder().count_tokens(TEXTS) == run.input_tokens
    assert run.input_tokens == 14 + 2 * 2  # the word pieces, and [CLS] and [SEP] each
    with pytest.raises(openai.BadRequestError) as refused:
        embed(keys["run"], model="local", input="x", dimensions=256)
    assert refused.value.param == "dimensions" and "384 dimensions" in refused.value.message


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"input": []}, "input", "non-empty string or a list"),
        ({"input": ["x"] * 2049}, "input", "at most 2048"),
        ({"input": [1, 2, 3]}, "input", "token arrays are not supported"),
        ({"input": {"text": "x"}}, "input", "non-empty string or a list"),
        ({"input": ["x" * 30_000] * 11}, "input", "at most 300,000 characters"),
        ({"input": "x", "dimensions": 128}, "dimensions", "256 dimensions"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", "`float` or `base64`"),
    ],
)
def test_bad_inputs_are_a_400_naming_the_field(trio, keys, fields, param, words):
    with pytest.raises(openai.BadRequestError) as refused:
        embed(keys["run"], model="static", **fields)
    assert refused.value.param == param and words in refused.value.message
    assert not Run.objects.exists()


def test_a_used_up_limit_refuses_the_platforms_models_as_any_other(trio, keys):
    key = trio.acme.api_keys.get(name="chat")
    quota = Quota.objects.create(
        tenant=trio.acme, scope="api_key", api_key=key, metric="tokens", period="day", limit=10
    )
    with pytest.raises(openai.RateLimitError) as refused:  # about 25 estimated tokens > 10
        embed(keys["run"], model="static", input=["a long first text to embed"] * 4)
    assert refused.value.code == "quota_exceeded"
    assert refused.value.body["type"] == "insufficient_quota"
    assert not Run.objects.exists() and quotas.used(quota) == 0

    result = embed(keys["run"], model="static", input="a cat", encoding_format="float")
    assert quotas.used(quota) == result.usage.prompt_tokens == 2  # settled to its count
    for name in versions.shared_redis().scan_iter(cache.make_key(f"quota:{quota.pk}:*")):
        versions.shared_redis().delete(name)
    assert quotas.used(quota) == 2  # and a counter rebuilt from the runs counts it


def test_a_key_limited_to_agents_neither_lists_nor_uses_them(trio, agent, keys):
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    assert [m.id for m in call(limited, "models.list").data] == ["assistant"]
    with pytest.raises(openai.NotFoundError):
        call(limited, "models.retrieve", model="static")
    with pytest.raises(openai.PermissionDeniedError):
        embed(limited, model="static", input="x")
    assert not Run.objects.exists()
