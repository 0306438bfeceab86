"""Provider fallback and load sharing on real runs (providers/runtime/fallback.py): two
local OpenAI-compatible servers on loopback; the first fails (503, 429, closed), the run
ends on the second with a `provider.fallback` event; a 400 does not fall back; round robin
spreads calls over two keys; a failing connection is tried last."""

from __future__ import annotations

import json
import socket

import pytest

from agents.models import RunEvent
from agents.runs import run_inline
from providers.models import HealthStatus
from providers.routing import BALANCER, check_connections
from tests.factories import make_agent, make_connection
from tests.fakes.provider_server import ErrorReply, ProviderServer, TextReply


@pytest.fixture
def backup_server():
    server = ProviderServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def backup(trio, backup_server, connection):
    return make_connection(
        trio.acme,
        "Backup",
        "openai",
        api_key="sk-backup-key",
        base_url=backup_server.openai_base_url,
        default_model="gpt-backup",
        max_retries=0,
    )


def closed_port_url() -> str:
    """A loopback URL where nothing listens: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def fallback_events(run) -> list[dict]:
    return list(
        RunEvent.objects.filter(run=run, type="provider.fallback").values_list("payload", flat=True)
    )


def chat_calls(server: ProviderServer) -> int:
    return len(server.requests_to("/v1/chat/completions"))


@pytest.mark.parametrize(
    "failure", [ErrorReply(503, "overloaded"), ErrorReply(429, "slow down sk-test-key")]
)
def test_a_retryable_failure_falls_back_to_the_next_connection(
    trio, provider_server, backup_server, backup, failure
):
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    provider_server.script("openai", failure)
    backup_server.script("openai", TextReply("from the backup"))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded" and run.output == "from the backup"
    assert backup_server.requests_to("/v1/chat/completions")[0].body["model"] == "gpt-backup"
    [event] = fallback_events(run)
    assert event["from"] == "Local OpenAI/gpt-test" and event["to"] == "Backup/gpt-backup"
    assert "Local OpenAI" in event["reason"]
    assert run.model == "gpt-backup"  # what answered (and what its cost is priced at)
    assert "slow down" not in event["reason"] and "overloaded" not in event["reason"]
    stored = json.dumps(list(RunEvent.objects.filter(run=run).values_list("payload", flat=True)))
    assert "sk-test-key" not in stored and "sk-backup-key" not in stored


def test_a_refused_connection_falls_back(trio, connection, backup_server, backup):
    connection.base_url = closed_port_url()
    connection.save()
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded" and run.output == "ok"
    [event] = fallback_events(run)
    assert event["to"] == "Backup/gpt-backup" and "unavailable" in event["reason"]


def test_a_bad_request_does_not_fall_back(trio, provider_server, backup_server, backup):
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    provider_server.script("openai", ErrorReply(400, "bad parameter"))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "failed"
    assert chat_calls(backup_server) == 0 and fallback_events(run) == []


def test_the_last_fallback_failing_fails_the_run(trio, provider_server, backup_server, backup):
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    provider_server.script("openai", ErrorReply(503))
    backup_server.script("openai", ErrorReply(503))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "failed"
    assert len(fallback_events(run)) == 1 and chat_calls(backup_server) == 1


def test_round_robin_spreads_calls_over_two_keys(trio, provider_server, connection):
    make_connection(
        trio.acme,
        "Second key",
        "openai",
        api_key="sk-second-key",
        base_url=provider_server.openai_base_url,
        default_model="gpt-test",
        max_retries=0,
    )
    agent = make_agent(
        trio.acme,
        "helper",
        fallbacks=[{"connection": "Second key", "model": "gpt-test"}],
        load_balancing="round_robin",
    )
    for _ in range(4):
        assert run_inline(tenant=trio.acme, agent=agent, input="hi").status == "succeeded"
    keys = [r.headers["authorization"] for r in provider_server.requests_to("/v1/chat/completions")]
    assert sorted(keys) == ["Bearer sk-second-key"] * 2 + ["Bearer sk-test-key"] * 2


def test_a_failing_connection_is_skipped(trio, provider_server, connection, backup_server, backup):
    connection.health_status = HealthStatus.FAILING
    connection.save()
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded"
    assert chat_calls(provider_server) == 0 and chat_calls(backup_server) == 1
    assert fallback_events(run) == []


def test_the_balancer_counts_nothing_in_flight_after_the_runs(trio, provider_server, backup):
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    provider_server.script("openai", ErrorReply(503))
    run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert BALANCER.in_flight(str(backup.tenant.provider_connections.get(name="Backup").pk)) == 0


def test_the_health_check_marks_each_connection(trio, provider_server, connection, backup):
    backup.base_url = closed_port_url()
    backup.save()
    assert check_connections() >= 2
    connection.refresh_from_db()
    backup.refresh_from_db()
    assert connection.health_status == HealthStatus.OK and connection.last_checked_at
    assert backup.health_status == HealthStatus.FAILING and backup.health_message
    assert "sk-backup-key" not in backup.health_message


def test_beat_checks_the_connections_on_the_housekeeping_queue(settings):
    [entry] = [
        e
        for e in settings.CELERY_BEAT_SCHEDULE.values()
        if e["task"] == "providers.check_connections"
    ]
    assert entry["schedule"] >= 30
    assert settings.CELERY_TASK_ROUTES["providers.check_connections"]["queue"] == (
        settings.HOUSEKEEPING_QUEUE
    )
    from providers.tasks import check_connections_task

    assert check_connections_task.name == "providers.check_connections"


def test_a_change_of_health_is_seen_by_the_next_run(
    trio, provider_server, connection, backup_server, backup
):
    """Runs read the tenant's default connection from a per-version memory: the check that
    marks it failing moves the version, so the next run tries it last."""
    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    assert run_inline(tenant=trio.acme, agent=agent, input="hi").status == "succeeded"
    assert chat_calls(provider_server) == 1
    provider_server.serve_models_list = False  # the check's 1-token request then fails:
    provider_server.script("openai", ErrorReply(503))  # no save of the connection moves it
    check_connections()
    connection.refresh_from_db()
    assert connection.health_status == HealthStatus.FAILING
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded" and fallback_events(run) == []
    assert chat_calls(backup_server) == 1
    assert chat_calls(provider_server) == 2  # the first run and the failed check only


def test_renaming_a_connection_carries_its_name_into_fallbacks_and_aliases(
    trio, connection, backup
):
    from providers.models import ModelAlias
    from providers.services import connection_save

    agent = make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": "x"}])
    alias = ModelAlias.objects.create(
        tenant=trio.acme, name="chat", targets=[{"connection": "Backup", "model": ""}]
    )
    connection_save(tenant=trio.acme, connection=backup, changes={"name": "Backup EU"})
    agent.refresh_from_db()
    alias.refresh_from_db()
    assert agent.fallbacks == [{"connection": "Backup EU", "model": "x"}]
    assert alias.targets == [{"connection": "Backup EU", "model": ""}]
