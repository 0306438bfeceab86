"""`chat <model>` spans of gateway calls (agentplatform/v1/gateway/call.py): one per pair tried,
passed through or translated, exported by the real server process (uvicorn, with
OTEL_EXPORTER_OTLP_ENDPOINT set) to the loopback collector stand-in; the real `openai` and
`anthropic` SDKs as callers."""

from __future__ import annotations

import anthropic
import openai
import pytest
from django.conf import settings

from providers.models import ModelPrice
from tests.api.conftest import sdk
from tests.api.test_gateway_fallback import ALIAS, make_alias, recorded
from tests.fakes.fixtures import provider_server_fixture
from tests.fakes.provider_server import MODEL_SUFFIX, ErrorReply, TextReply
from tests.providers.test_fallback import closed_port_url

pytestmark = pytest.mark.django_db(transaction=True)

SPAN_KIND_CLIENT, STATUS_ERROR = 3, 2


backup_server = pytest.fixture(name="backup_server")(provider_server_fixture)


def test_each_pair_an_alias_tries_is_a_chat_span(
    trio, traced_server, keys, connection, provider_server, backup_server, collector
):
    make_alias(trio.acme, backup_server)
    ModelPrice.objects.create(  # $10 in, $20 out per million tokens
        tenant=trio.acme, provider_kind="openai", model="gpt-backup", input_price=10,
        output_price=20, cached_input_price=0, cache_write_price=0,
    )  # fmt: skip
    provider_server.script("openai", ErrorReply(503, "overloaded"))
    backup_server.script(
        "openai", TextReply("A confidential answer.", input_tokens=12, output_tokens=3)
    )
    client = sdk(traced_server, keys["run"])
    answer = client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "A private question"}], temperature=0.5
    )
    assert answer.choices[0].message.content == "A confidential answer."

    [failed] = collector.wait_for("chat gpt-test")
    [answered] = collector.wait_for("chat gpt-backup")
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.max_tokens": settings.GATEWAY_DEFAULT_MAX_TOKENS,  # (sent: none asked)
        "agentplatform.tenant.id": str(trio.acme.pk),
        "agentplatform.tenant": "acme",
        "agentplatform.gateway.model": ALIAS,
    }
    assert failed.kind == answered.kind == SPAN_KIND_CLIENT
    assert failed.attributes == {
        **common,
        "gen_ai.request.model": "gpt-test",
        "agentplatform.connection": "Local OpenAI",
        "agentplatform.gateway.attempt": 1,
        "error.type": "503",
    }
    assert failed.status_code == STATUS_ERROR
    assert answered.attributes == {
        **common,
        "gen_ai.request.model": "gpt-backup",
        "gen_ai.response.model": "gpt-backup" + MODEL_SUFFIX,
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "agentplatform.connection": "Backup",
        "agentplatform.gateway.attempt": 2,
        "agentplatform.cost_usd": 0.00018,
    }
    assert answered.status_code != STATUS_ERROR
    sent = b"".join(collector.bodies)  # no content, no key, no provider's error text
    for content in (b"private question", b"confidential", b"overloaded", b"sk-test", b"sk-backup"):
        assert content not in sent
    recorded()


def test_a_translated_stream_and_an_unreachable_provider_are_spans(
    trio, traced_server, keys, connection, provider_server, collector
):
    provider_server.script("openai", TextReply("Streamed.", input_tokens=9, output_tokens=4))
    claude = anthropic.Anthropic(api_key=keys["run"], base_url=traced_server, max_retries=0)
    with claude.messages.stream(
        model="local-openai/gpt-test", max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        assert "".join(stream.text_stream) == "Streamed."
    [streamed] = collector.wait_for("chat gpt-test")
    assert streamed.attributes["gen_ai.usage.input_tokens"] == 9  # (known once it ended)
    assert streamed.attributes["gen_ai.usage.output_tokens"] == 4
    assert streamed.attributes["gen_ai.response.model"] == "gpt-test" + MODEL_SUFFIX
    assert streamed.attributes["gen_ai.request.max_tokens"] == 50
    assert "agentplatform.cost_usd" not in streamed.attributes  # (no price of gpt-test)

    connection.base_url = closed_port_url()
    connection.save()
    client = sdk(traced_server, keys["run"])
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="local-openai/gpt-test", input="Hi")
    unreached = collector.wait_for("chat gpt-test", count=2)[1]
    assert unreached.status_code == STATUS_ERROR
    assert unreached.attributes["error.type"] == "ProviderUnavailable"
    assert "gen_ai.usage.input_tokens" not in unreached.attributes
