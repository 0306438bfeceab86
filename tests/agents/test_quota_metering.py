"""The model calls beyond a run's own held against its quotas (agents.quotas): the `llm`
built-in (in a run, called directly, and in a tool's self-test) and an evaluation's judge.
Each reserves before the provider is contacted and settles to what the call's record says
it used (tokens and cost at the same prices), and a refusal is an error result plus
`tool.quota_exceeded` (the tool), or a failed case naming the limit (the judge)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agents import quotas
from agents.evaluations import case_save, dataset_save, score_answer
from agents.judging import judge_answer
from agents.models import Quota, Run, RunEvent
from agents.runs import run_inline
from agents.runs.direct_calls import tool_run
from agents.selftests import selftest_tools
from providers.models import ModelPrice
from tests.factories import make_connection
from tests.fakes.provider_server import MODEL_SUFFIX, TextReply, ToolCall, ToolCallReply
from tools.services import tool_definition_save

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claude(trio, provider_server, connection):
    """acme's second connection: Anthropic on the local provider server."""
    return make_connection(
        trio.acme,
        "Claude",
        "anthropic",
        api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url,
        default_model="claude-test",
        max_retries=0,
    )


def _limit(tenant, limit, **fields) -> Quota:
    fields = {"scope": "tenant", "metric": "tokens", "period": "day", **fields}
    return Quota.objects.create(tenant=tenant, limit=limit, **fields)


def _price(tenant, kind: str, model: str, input: str, output: str) -> None:
    ModelPrice.objects.create(
        tenant=tenant, provider_kind=kind, model=model, input_price=Decimal(input),
        output_price=Decimal(output), cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip


def _asks_claude(provider_server, max_tokens: int) -> None:
    question = {"question": "6*7?", "connection": "Claude", "max_tokens": max_tokens}
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("l1", "llm", json.dumps(question))], input_tokens=11,
                      output_tokens=4),
        TextReply("Done.", input_tokens=30, output_tokens=6),
    )  # fmt: skip


# -- the `llm` built-in -------------------------------------------------------------------------
def test_the_llm_tools_call_is_held_and_settled_as_the_run_records_it(
    trio, agent, claude, provider_server
):
    _price(trio.acme, "openai", "gpt-test", "100", "1000")
    _price(trio.acme, "anthropic", "claude-test", "3000", "15000")  # priced apart from the run's
    tokens = _limit(trio.acme, 100_000, scope="member", user=trio.bob)
    dollars = _limit(trio.acme, Decimal("50"), scope="agent", agent=agent, metric="cost")
    _asks_claude(provider_server, max_tokens=50)
    provider_server.script("anthropic", TextReply("42", input_tokens=100, output_tokens=7))

    run = run_inline(tenant=trio.acme, agent=agent, input="Ask Claude", initiated_by=trio.bob)

    assert run.status == "succeeded", run.error
    assert (run.input_tokens, run.output_tokens) == (11 + 30 + 100, 4 + 6 + 7)
    # What the counters hold is what the run's record says: its tokens, its cost.
    assert quotas.used(tokens) == run.input_tokens + run.output_tokens
    assert Decimal(str(quotas.used(dollars))) == run.cost_usd > 0
    claude_part = Decimal(100 * 3000 + 7 * 15000) / 1_000_000
    assert run.cost_usd == Decimal(41 * 100 + 10 * 1000) / 1_000_000 + claude_part


def test_a_refused_llm_call_is_an_error_result_and_an_event(trio, agent, claude, provider_server):
    # The run's own calls (input + 1,024 output tokens held) fit; the tool's (4,000) does not.
    quota = _limit(trio.acme, 3000)
    _asks_claude(provider_server, max_tokens=4000)

    run = run_inline(tenant=trio.acme, agent=agent, input="Ask Claude", initiated_by=trio.bob)

    assert run.status == "succeeded", run.error  # the model reads the refusal and answers
    assert provider_server.requests_to("/v1/messages") == []  # Claude was never asked
    [refused] = RunEvent.objects.filter(run=run, type="tool.quota_exceeded")
    message = refused.payload["message"]
    assert message.startswith(
        "Quota exceeded: the daily limit of 3,000 tokens for the tenant cannot take this call "
        "(up to "
    )
    assert "It resets at " in message and " UTC (in " in message
    assert refused.payload | {"message": "", "retry_after_s": 0, "resets_at": ""} == {
        "call_id": "l1", "name": "llm", "connection": "Claude", "model": "claude-test",
        "message": "", "quota_id": quota.pk, "scope": "tenant", "metric": "tokens",
        "period": "day", "limit": 3000, "used": refused.payload["used"], "resets_at": "",
        "time_zone": "UTC", "retry_after_s": 0,
    }  # fmt: skip
    [completed] = RunEvent.objects.filter(run=run, type="tool.completed")
    assert completed.payload["error"] == message and completed.payload["result"] is None
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert message in told["content"]  # the model reads why
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types.index("tool.quota_exceeded") < types.index("tool.completed")
    assert not RunEvent.objects.filter(run=run, type="tool.usage").exists()
    assert quotas.used(quota) == run.input_tokens + run.output_tokens == 11 + 30 + 4 + 6


def test_a_direct_llm_call_is_held_against_its_callers_limits(trio, connection, provider_server):
    quota = _limit(trio.acme, 0, scope="member", user=trio.bob)
    outcome = tool_run(
        tenant=trio.acme, name="llm", arguments={"question": "hello"}, user=trio.bob, via="rest"
    )
    assert outcome.status == "failed"
    assert outcome.error.startswith("Quota exceeded: the daily limit of 0 tokens for member bob")
    assert provider_server.requests_to("/v1/chat/completions") == []
    run = Run.objects.get(pk=outcome.run_id)
    assert RunEvent.objects.filter(run=run, type="tool.quota_exceeded").count() == 1

    quota.limit = 10_000
    quota.save()
    provider_server.script("openai", TextReply("hi", input_tokens=9, output_tokens=3))
    outcome = tool_run(
        tenant=trio.acme, name="llm", arguments={"question": "hello"}, user=trio.bob, via="rest"
    )
    assert outcome.status == "succeeded", outcome.error
    assert quotas.used(quota) == 12


def test_a_self_tests_llm_call_is_held_and_recorded(trio, connection, provider_server):
    quota = _limit(trio.acme, 0)
    tool_definition_save(
        tenant=trio.acme,
        definition=None,
        changes={
            "name": "ask", "kind": "builtin", "config": {"builtin": "llm"},
            "description": "Ask a model.", "examples": [{"arguments": {"question": "hello"}}],
        },
    )  # fmt: skip
    [health] = selftest_tools(trio.acme, ["ask"])
    assert health.status == "failing"
    assert health.results[0]["detail"].startswith("failed: Quota exceeded: the daily limit of 0")
    assert provider_server.requests_to("/v1/chat/completions") == []

    quota.limit = 10_000
    quota.save()
    provider_server.script("openai", TextReply("hi", input_tokens=9, output_tokens=3))
    [health] = selftest_tools(trio.acme, ["ask"])
    assert health.status == "passing", health.results
    assert quotas.used(quota) == 12
    # The example is a direct call of the platform's: its run carries the usage.
    record = Run.objects.get(pk=health.results[0]["run_id"])
    assert (record.tool_name, record.status) == ("ask", "succeeded")
    assert (record.input_tokens, record.output_tokens) == (9, 3)
    assert record.initiated_by_user_id is None and record.initiated_by_api_key_id is None
    answered = "gpt-test" + MODEL_SUFFIX
    assert not Run.objects.filter(gateway_model=f"local-openai/{answered}").exists()  # once


# -- the judge ---------------------------------------------------------------------------------
def _case_run(trio, agent) -> Run:
    return Run.objects.create(
        tenant=trio.acme, agent=agent, initiated_by_user=trio.bob, input="hi", output="Hello!",
        status="succeeded", correlation_id="case",
    )  # fmt: skip


class _Evaluation:
    def __init__(self, dataset) -> None:
        self.dataset = dataset


def test_a_refused_judge_fails_the_case_with_the_limit(trio, agent, provider_server):
    dataset = dataset_save(tenant=trio.acme, changes={"name": "tone"})
    case_save(tenant=trio.acme, dataset=dataset, changes={"input": "hi", "expect": {"judge": "x"}})
    run = _case_run(trio, agent)
    _limit(trio.acme, 0, scope="agent", agent=agent)  # the case's run's agent

    score = score_answer(_Evaluation(dataset), {"judge": "Kind."}, run)

    assert score.outcome == "failed" and not score.judged  # no verdict on the answer
    assert score.reason.startswith(
        "Quota exceeded: the daily limit of 0 tokens for agent 'assistant' is used up"
    )
    assert provider_server.requests_to("/v1/chat/completions") == []
    assert not Run.objects.filter(gateway_model__endswith="/gpt-test").exists()  # not recorded


def test_the_judges_call_settles_to_its_record(trio, agent, provider_server):
    _price(trio.acme, "openai", "gpt-test", "100", "1000")
    dataset = dataset_save(tenant=trio.acme, changes={"name": "tone"})
    run = _case_run(trio, agent)
    tokens = _limit(trio.acme, 100_000, scope="member", user=trio.bob)
    dollars = _limit(trio.acme, Decimal("5"), metric="cost")
    reply = '{"passed": true, "reason": "Polite."}'
    provider_server.script("openai", TextReply(reply, input_tokens=50, output_tokens=7))

    verdict = judge_answer(dataset, rubric="Kind.", input="hi", answer="Hello!", run=run)

    assert verdict.passed is True
    judged = Run.objects.get(gateway_model="local-openai/gpt-test")
    assert judged.initiated_by_user == trio.bob  # the case's member: the same limits
    assert quotas.used(tokens) == judged.input_tokens + judged.output_tokens == 57
    assert Decimal(str(quotas.used(dollars))) == judged.cost_usd == Decimal("0.012")
