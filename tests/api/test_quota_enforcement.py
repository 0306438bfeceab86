"""Quotas enforced at every entry point: REST and /v1 answer 429 (the real `openai` SDK sees
a RateLimitError), the chat shows the refusal, a run refused at its first model call fails
with the limit as its reason, and gateway calls are refused before the provider hears of
them; what a call used is settled on its limits."""

from __future__ import annotations

import time
from decimal import Decimal

import openai
import pytest
from django.test import Client

from agents import quotas
from agents.models import Quota, Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from agents.signals import run_queued
from providers.models import ModelPrice
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.api.test_runs_api import client_for
from tests.factories import login, make_crew
from tests.fakes.provider_server import TextReply

COMPLETIONS = "/v1/chat/completions"


def _used_up(tenant, **fields) -> Quota:
    """A limit of 0: used up whatever the counters say."""
    fields = {"scope": "tenant", "metric": "tokens", "period": "day", **fields}
    return Quota.objects.create(tenant=tenant, limit=0, **fields)


# -- REST, the chat, the run ------------------------------------------------------------------
@pytest.mark.django_db
def test_rest_refuses_a_run_with_429_naming_the_limit(trio, agent):
    _, key = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    _used_up(trio.acme)
    response = client_for(key).post(
        "/api/v1/runs", {"agent": "assistant", "input": "hi"}, format="json"
    )
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["message"].startswith(
        "Quota exceeded: the daily limit of 0 tokens for the tenant is used up"
    )
    assert error["details"]["period"] == "day" and error["details"]["limit"] == 0
    assert int(response["Retry-After"]) == error["details"]["retry_after_s"] > 0
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_chat_shows_the_refusal_and_starts_nothing(client: Client, trio, agent):
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    _used_up(trio.acme, scope="member", user=trio.bob)
    response = login(client, trio.bob).post(
        f"/t/acme/chat/{chat.pk}/send/", {"message": "hello"}, headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    assert response["X-Chat-Status"] == "429"
    assert "Quota exceeded: the daily limit of 0 tokens for member bob is used up" in page
    assert "It resets at" in page
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_run_refused_at_its_first_model_call_fails_with_the_limit(trio, agent, provider_server):
    quota = Quota.objects.create(
        tenant=trio.acme, scope="agent", agent=agent, metric="tokens", period="month", limit=500
    )  # the input fits, the model call's estimate (input + 1,024 output tokens) does not
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.bob)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith("QuotaExceeded: Quota exceeded: the monthly limit of 500 tokens")
    failed = RunEvent.objects.get(run=run, type="run.failed")
    assert "for agent 'assistant' cannot take this call (up to " in failed.payload["error"]
    assert provider_server.requests_to(COMPLETIONS) == []  # the model was never called
    assert quotas.used(quota) == 0  # nothing stays held

    quota.limit = 5000
    quota.save()
    provider_server.script("openai", TextReply("Hi.", input_tokens=40, output_tokens=2))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.bob)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert quotas.used(quota) == 42  # settled to what the provider counted


@pytest.mark.django_db
def test_a_crews_child_runs_count_against_the_members_limit(trio, agent, provider_server):
    crew = make_crew(trio.acme, "desk", [agent])
    quota = Quota.objects.create(
        tenant=trio.acme, scope="member", user=trio.bob, metric="tokens", period="day",
        limit=100_000,
    )  # fmt: skip
    provider_server.script("openai", TextReply("Done.", input_tokens=30, output_tokens=5))
    run = run_start(tenant=trio.acme, crew=crew, input="plan", initiated_by=trio.bob)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert quotas.used(quota) == 35
    quota.limit = 35
    quota.save()
    with pytest.raises(quotas.QuotaExceeded):
        run_start(tenant=trio.acme, crew=crew, input="again", initiated_by=trio.bob)


# -- /v1 with the real openai SDK ---------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_v1_refuses_an_agent_and_a_gateway_model_with_429_before_the_provider(
    trio, agent, asgi_server, keys, provider_server
):
    _used_up(trio.acme, scope="api_key", api_key=trio.acme.api_keys.get(name="chat"))
    client = sdk(asgi_server, keys["run"])
    hello = [{"role": "user", "content": "hi"}]
    for model in ("assistant", "local-openai/gpt-test"):
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model=model, messages=hello)
        error = refused.value
        assert error.status_code == 429 and error.code == "quota_exceeded"
        assert error.body["type"] == "insufficient_quota"
        assert "the daily limit of 0 tokens for API key 'chat' is used up" in error.message
        assert int(error.response.headers["retry-after"]) > 0
        with pytest.raises(openai.RateLimitError):
            list(client.chat.completions.create(model=model, messages=hello, stream=True))
    assert provider_server.requests_to(COMPLETIONS) == []
    assert not Run.objects.exists()
    # Another key of the tenant is not limited.
    provider_server.script("openai", TextReply("Hi.", input_tokens=5, output_tokens=1))
    _, other = tenancy.api_key_create(tenant=trio.acme, name="other", scopes=["read", "run"])
    sdk(asgi_server, other).chat.completions.create(model="local-openai/gpt-test", messages=hello)


@pytest.mark.django_db(transaction=True)
def test_a_gateway_call_settles_its_limit_with_the_usage(
    trio, connection, asgi_server, keys, provider_server
):
    quota = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=100_000
    )
    provider_server.script("openai", TextReply("Hi.", input_tokens=9, output_tokens=4))
    sdk(asgi_server, keys["run"]).chat.completions.create(
        model="local-openai/gpt-test", messages=[{"role": "user", "content": "hi"}], max_tokens=50
    )
    for _ in range(100):  # settled just after the answer, off its path
        if quotas.used(quota) == 13:
            break
        time.sleep(0.05)
    assert quotas.used(quota) == 13


# -- cost limits, at the tenant's prices ---------------------------------------------------------
@pytest.mark.django_db(transaction=True)  # (prices are read on a thread, as in a worker)
def test_a_cost_limit_settles_a_run_at_its_price_and_then_refuses(
    trio, agent, provider_server, monkeypatch
):
    monkeypatch.setattr(run_queued, "receivers", [])  # executed here, not by the session's worker
    ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="openai", model="gpt-test",
        input_price=Decimal("100"), output_price=Decimal("1000"),
        cached_input_price=Decimal("0"), cache_write_price=Decimal("0"),
    )  # $0.0001 per input token, $0.001 per output token  # fmt: skip
    quota = Quota.objects.create(
        tenant=trio.acme, scope="member", user=trio.bob, metric="cost", period="month",
        limit=Decimal("3.00"),
    )  # fmt: skip
    provider_server.script("openai", TextReply("Hi.", input_tokens=100, output_tokens=50))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.bob)
    execute_run(run.pk)  # held: the input estimate + 1,024 output tokens, priced: over $1.02
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert quotas.used(quota) == 0.06  # 100 x $0.0001 + 50 x $0.001
    quota.limit = Decimal("1.00")  # the next call's estimate cannot fit
    quota.save()
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.bob)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert "the monthly limit of $1.00 for member bob cannot take this call (up to $1." in run.error
    assert "; $0.06 used of $1.00 this month). It resets at 2027-01-01 00:00 UTC" in run.error


# -- MCP -----------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_mcp_ask_is_an_error_result_naming_the_limit(trio, agent, asgi_server, provider_server):
    from tests.mcp.test_server import call, text_of

    mcp_server = f"{asgi_server}/mcp"
    run_key, key = tenancy.api_key_create(tenant=trio.acme, name="mcp", scopes=["read", "run"])
    _used_up(trio.acme, scope="api_key", api_key=run_key)
    result = call(mcp_server, key, "ask_assistant", {"message": "hi"})
    assert result.is_error and result.meta["status"] == "quota_exceeded"
    assert result.meta["retry_after_s"] > 0
    assert "the daily limit of 0 tokens for API key 'mcp' is used up" in text_of(result)
    assert not Run.objects.exists() and provider_server.requests_to(COMPLETIONS) == []


@pytest.mark.django_db(transaction=True)
def test_v1_messages_refuses_in_anthropics_shape_with_the_real_sdk(
    trio, agent, asgi_server, keys, provider_server
):
    import anthropic

    _used_up(trio.acme)
    claude = anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0)
    hello = [{"role": "user", "content": "hi"}]
    for model in ("assistant", "local-openai/gpt-test"):  # an agent; a gateway model
        with pytest.raises(anthropic.RateLimitError) as refused:
            claude.messages.create(model=model, max_tokens=100, messages=hello)
        assert refused.value.body["error"]["type"] == "rate_limit_error"
        assert "the daily limit of 0 tokens for the tenant is used up" in str(refused.value)
        assert int(refused.value.response.headers["retry-after"]) > 0
    assert provider_server.requests_to(COMPLETIONS) == [] and not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_v1_answers_429_for_a_run_refused_at_its_first_model_call(
    trio, agent, asgi_server, keys, provider_server, celery_worker_process
):
    Quota.objects.create(
        tenant=trio.acme, scope="agent", agent=agent, metric="tokens", period="day", limit=500
    )  # "hi" fits; the call's estimate (with 1,024 output tokens) does not
    client = sdk(asgi_server, keys["run"])
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}]
        )
    error = refused.value
    assert error.code == "quota_exceeded" and error.body["type"] == "insufficient_quota"
    run = Run.objects.get(pk=int(error.response.headers["x-run-id"]))
    assert run.status == "failed" and f"Run {run.pk} was refused: Quota exceeded: " in error.message
    assert "the daily limit of 500 tokens for agent 'assistant' cannot take" in error.message
    assert 0 < int(error.response.headers["retry-after"]) <= 86_400
    assert provider_server.requests_to(COMPLETIONS) == []


@pytest.mark.django_db
def test_an_agent_with_fallbacks_is_held_to_its_limits_too(trio, agent, provider_server):
    """The limits meter the fallback chain as one call, whichever connection answers it."""
    from tests.factories import make_connection

    make_connection(
        trio.acme, "Backup", "openai", base_url=provider_server.openai_base_url, max_retries=0
    )
    agent.fallbacks = [{"connection": "Backup", "model": "gpt-backup"}]
    agent.save()
    quota = Quota.objects.create(
        tenant=trio.acme, scope="agent", agent=agent, metric="tokens", period="day", limit=500
    )
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.bob)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and "the daily limit of 500 tokens" in run.error
    assert provider_server.requests_to(COMPLETIONS) == []  # neither connection was called
    assert quotas.used(quota) == 0
