"""Model aliases on the gateway (`alias/<name>`): a tenant's ordered connection/model
pairs; a retryable failure of one (503, 429, refused) goes on to the next, recorded as a
`provider.fallback` event of the call's run; a 400 is the caller's answer; round robin
spreads calls over two keys. The same on every endpoint, passed through or translated:
/v1/chat/completions, /v1/responses, /v1/messages (an OpenAI alias), /v1/chat/completions
with an Anthropic alias. The real `openai` and `anthropic` SDKs against a live server."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from agents.models import Run, RunEvent
from providers.models import ModelAlias, ProviderConnection
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
    return make_alias(trio.acme, backup_server)


def make_alias(tenant, backup_server: ProviderServer) -> ModelAlias:
    """`alias/chat`: the `connection` fixture's gpt-test, then a Backup connection's
    default model (gpt-backup) on `backup_server`."""
    make_connection(
        tenant,
        "Backup",
        "openai",
        api_key="sk-backup-key",
        base_url=backup_server.openai_base_url,
        default_model="gpt-backup",
        max_retries=0,
    )
    return ModelAlias.objects.create(
        tenant=tenant,
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


# == /v1/responses and translated calls: the same rules, one implementation ==================
@pytest.fixture
def claude(asgi_server, keys, connection) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0)


def respond(client: openai.OpenAI, **extra):
    return client.responses.create(model=ALIAS, input="Hi", **extra)


def ask(claude: anthropic.Anthropic, **extra):
    return claude.messages.create(
        model=ALIAS, max_tokens=50, messages=[{"role": "user", "content": "Hi"}], **extra
    )


def test_responses_fall_back_on_a_retryable_answer(client, alias, provider_server, backup_server):
    provider_server.script("openai", ErrorReply(503, "overloaded"))
    backup_server.script("openai", TextReply("from the backup", input_tokens=7))
    response = respond(client)
    assert response.output_text == "from the backup" and response.model == ALIAS
    assert response.usage.input_tokens == 7
    assert backup_server.requests_to("/v1/chat/completions")[0].body["model"] == "gpt-backup"
    [run] = recorded()
    assert (run.status, run.model, run.input_tokens, run.input) == (
        "succeeded",
        "gpt-backup",
        7,
        "Hi",
    )
    [event] = switches(run)
    assert event["from"] == "Local OpenAI/gpt-test" and event["to"] == "Backup/gpt-backup"
    assert "overloaded" not in event["reason"]


def test_a_responses_stream_falls_back_before_it_begins(
    client, alias, provider_server, backup_server
):
    provider_server.script("openai", ErrorReply(429, "slow"))
    backup_server.script("openai", TextReply("streamed from the backup"))
    events = list(respond(client, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "streamed from the backup" and events[-1].type == "response.completed"
    [run] = recorded()
    assert run.model == "gpt-backup" and len(switches(run)) == 1


def test_responses_answer_a_bad_request_without_falling_back(
    client, alias, provider_server, backup_server
):
    provider_server.script("openai", ErrorReply(400, "bad parameter"))
    with pytest.raises(openai.BadRequestError):
        respond(client)
    assert backup_server.requests_to("/v1/chat/completions") == []
    [run] = recorded()
    assert run.status == "failed" and switches(run) == []


def test_responses_say_when_every_pair_failed(client, alias, provider_server, backup_server):
    provider_server.script("openai", ErrorReply(503))
    backup_server.script("openai", ErrorReply(502))
    with pytest.raises(openai.InternalServerError) as failed:
        respond(client)
    assert failed.value.status_code == 502  # the last pair's failure, said in our words
    [run] = recorded()
    assert run.status == "failed" and len(switches(run)) == 1


def test_a_message_to_an_openai_alias_falls_back_translated(
    trio, claude, alias, provider_server, backup_server
):
    """Each pair gets the body its connection takes: `max_completion_tokens` for an OpenAI
    one, `max_tokens` for an OpenAI-compatible one."""
    backup = ProviderConnection.objects.get(tenant=trio.acme, name="Backup")
    backup.kind, backup.preset = "openai_compatible", "custom"
    backup.save()
    provider_server.script("openai", ErrorReply(500, "down"))
    backup_server.script("openai", TextReply("Hi from the backup."))
    message = ask(claude)
    assert [b.text for b in message.content] == ["Hi from the backup."]
    first = provider_server.requests_to("/v1/chat/completions")[0].body
    second = backup_server.requests_to("/v1/chat/completions")[0].body
    assert first["max_completion_tokens"] == 50 and "max_tokens" not in first
    assert second["max_tokens"] == 50 and "max_completion_tokens" not in second
    [run] = recorded()
    assert run.model == "gpt-backup" and len(switches(run)) == 1


def test_a_translated_stream_falls_back_before_it_begins(claude, alias, connection, backup_server):
    connection.base_url = closed_port_url()
    connection.save()
    backup_server.script("openai", TextReply("streamed from the backup"))
    with claude.messages.stream(
        model=ALIAS, max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == "streamed from the backup"
    [run] = recorded()
    assert "unavailable" in switches(run)[0]["reason"]


def test_a_translated_call_refused_for_its_credentials_does_not_fall_back(
    claude, alias, provider_server, backup_server
):
    provider_server.script("openai", ErrorReply(401, "bad key"))
    with pytest.raises(anthropic.APIStatusError) as refused:
        ask(claude)
    assert refused.value.status_code == 502 and "admin" in str(refused.value)
    assert backup_server.requests_to("/v1/chat/completions") == []


@pytest.fixture
def claude_alias(trio, provider_server, backup_server, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    for name, server, key in (("Claude", provider_server, "sk-ant-1"),
                              ("Claude backup", backup_server, "sk-ant-2")):  # fmt: skip
        make_connection(
            trio.acme, name, "anthropic", api_key=key, base_url=server.anthropic_base_url,
            default_model="claude-test", max_retries=0,
        )  # fmt: skip
    return ModelAlias.objects.create(
        tenant=trio.acme,
        name="chat",
        targets=[
            {"connection": "Claude", "model": ""},
            {"connection": "Claude backup", "model": ""},
        ],
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_completion_to_an_anthropic_alias_falls_back_translated(
    asgi_server, keys, claude_alias, provider_server, backup_server, stream
):
    client = sdk(asgi_server, keys["run"])
    provider_server.script("anthropic", ErrorReply(529, "overloaded"))
    backup_server.script("anthropic", TextReply("Claude's backup."))
    if stream:
        chunks = chat(client, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = chat(client).choices[0].message.content
    assert text == "Claude's backup."
    assert backup_server.requests_to("/v1/messages")[0].headers["x-api-key"] == "sk-ant-2"
    [run] = recorded()
    assert run.model == "claude-test" and run.status == "succeeded"
    [event] = switches(run)
    assert event["from"] == "Claude/claude-test" and event["to"] == "Claude backup/claude-test"


def test_a_translated_call_tries_a_failing_connection_last(
    claude, alias, connection, provider_server, backup_server
):
    connection.health_status = "failing"
    connection.save()
    assert [b.text for b in ask(claude).content] == ["ok"]
    assert provider_server.requests_to("/v1/chat/completions") == []
    assert len(backup_server.requests_to("/v1/chat/completions")) == 1


def test_round_robin_spreads_translated_and_responses_calls(
    trio, client, claude, connection, provider_server
):
    make_connection(
        trio.acme, "Second key", "openai", api_key="sk-second-key",
        base_url=provider_server.openai_base_url, max_retries=0,
    )  # fmt: skip
    ModelAlias.objects.create(
        tenant=trio.acme,
        name="chat",
        load_balancing="round_robin",
        targets=[
            {"connection": "Local OpenAI", "model": "gpt-test"},
            {"connection": "Second key", "model": "gpt-test"},
        ],
    )
    for _ in range(2):
        respond(client)
        ask(claude)
    keys = [r.headers["authorization"] for r in provider_server.requests_to("/v1/chat/completions")]
    assert sorted(keys) == ["Bearer sk-second-key"] * 2 + ["Bearer sk-test-key"] * 2
