"""Model aliases on the gateway (`alias/<name>`): a tenant's ordered connection/model
pairs; a retryable failure of one (503, 429, refused) goes on to the next, recorded as a
`provider.fallback` event of the call's run; a 400 is the caller's answer; round robin
spreads calls over two keys. The real `openai` SDK against a live server."""

from __future__ import annotations

import time

import openai
import pytest

from agents.models import Run, RunEvent
from providers.models import ModelAlias
from tests.api.conftest import sdk
from tests.factories import make_connection
from tests.fakes.provider_server import ErrorReply, ProviderServer, TextReply
from tests.providers.test_fallback import closed_port_url

pytestmark = pytest.mark.django_db(transaction=True)

ALIAS = "alias/chat"


@pytest.fixture
def backup_server():
    server = ProviderServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def client(asgi_server, keys, connection) -> openai.OpenAI:
    return sdk(asgi_server, keys["run"])


@pytest.fixture
def alias(trio, connection, backup_server):
    make_connection(
        trio.acme,
        "Backup",
        "openai",
        api_key="sk-backup-key",
        base_url=backup_server.openai_base_url,
        default_model="gpt-backup",
        max_retries=0,
    )
    return ModelAlias.objects.create(
        tenant=trio.acme,
        name="chat",
        targets=[
            {"connection": "Local OpenAI", "model": "gpt-test"},
            {"connection": "Backup", "model": ""},
        ],
    )


def recorded(count: int = 1) -> list[Run]:
    for _ in range(100):  # written just after the answer, off the request's path
        runs = list(Run.objects.filter(gateway_model=ALIAS).order_by("pk"))
        if len(runs) >= count:
            return runs
        time.sleep(0.05)
    raise AssertionError("the gateway call was not recorded")


def switches(run: Run) -> list[dict]:
    events = RunEvent.objects.filter(run=run, type="provider.fallback")
    return list(events.values_list("payload", flat=True))


def chat(client: openai.OpenAI, **extra):
    return client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "Hi"}], **extra
    )


@pytest.mark.parametrize("failure", [ErrorReply(503, "overloaded"), ErrorReply(429, "slow")])
def test_an_alias_falls_back_on_a_retryable_answer(
    client, alias, provider_server, backup_server, failure
):
    provider_server.script("openai", failure)
    backup_server.script("openai", TextReply("from the backup"))
    assert chat(client).choices[0].message.content == "from the backup"
    assert backup_server.requests_to("/v1/chat/completions")[0].body["model"] == "gpt-backup"
    [run] = recorded()
    assert run.status == "succeeded" and run.model == "gpt-backup"
    [event] = switches(run)
    assert event["from"] == "Local OpenAI/gpt-test" and event["to"] == "Backup/gpt-backup"
    assert "overloaded" not in event["reason"] and "slow" not in event["reason"]


def test_a_stream_falls_back_before_it_begins(client, alias, provider_server, backup_server):
    provider_server.script("openai", ErrorReply(503))
    backup_server.script("openai", TextReply("streamed from the backup"))
    text = "".join(c.choices[0].delta.content or "" for c in chat(client, stream=True) if c.choices)
    assert text == "streamed from the backup"
    [run] = recorded()
    assert len(switches(run)) == 1


def test_a_refused_connection_falls_back(client, alias, connection, backup_server):
    connection.base_url = closed_port_url()
    connection.save()
    assert chat(client).choices[0].message.content == "ok"
    [run] = recorded()
    assert "unavailable" in switches(run)[0]["reason"]


def test_a_bad_request_is_answered_without_falling_back(
    client, alias, provider_server, backup_server
):
    provider_server.script("openai", ErrorReply(400, "bad parameter"))
    with pytest.raises(openai.BadRequestError):
        chat(client)
    assert backup_server.requests_to("/v1/chat/completions") == []
    [run] = recorded()
    assert run.status == "failed" and switches(run) == []


def test_round_robin_spreads_calls_over_two_keys(trio, client, connection, provider_server):
    make_connection(
        trio.acme,
        "Second key",
        "openai",
        api_key="sk-second-key",
        base_url=provider_server.openai_base_url,
        max_retries=0,
    )
    ModelAlias.objects.create(
        tenant=trio.acme,
        name="chat",
        load_balancing="round_robin",
        targets=[
            {"connection": "Local OpenAI", "model": "gpt-test"},
            {"connection": "Second key", "model": "gpt-test"},
        ],
    )
    for _ in range(4):
        chat(client)
    keys = [r.headers["authorization"] for r in provider_server.requests_to("/v1/chat/completions")]
    assert sorted(keys) == ["Bearer sk-second-key"] * 2 + ["Bearer sk-test-key"] * 2


def test_an_alias_is_listed_and_an_unknown_one_is_a_404(client, alias):
    assert ALIAS in {m.id for m in client.models.list().data}
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="alias/nothing", messages=[{"role": "user", "content": "Hi"}]
        )


def test_a_failing_connection_is_tried_last(
    client, alias, connection, provider_server, backup_server
):
    connection.health_status = "failing"
    connection.save()
    assert chat(client).choices[0].message.content == "ok"
    assert provider_server.requests_to("/v1/chat/completions") == []
    assert len(backup_server.requests_to("/v1/chat/completions")) == 1
