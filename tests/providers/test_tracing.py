"""`chat <model>` spans (providers/runtime/tracing.py) of the model calls outside the agent
loop: the `llm` built-in's (a child of its `execute_tool` span) and the evaluation judge's,
exported over OTLP/HTTP to the loopback collector stand-in. The gateway's:
tests/api/test_gateway_spans.py; the loop's: tests/agents/test_tracing.py."""

from __future__ import annotations

import json

import pytest

from agents.evaluations import dataset_save
from agents.judging import judge_answer
from agents.runs import run_inline
from agents.runtime import tracing
from providers.models import ModelPrice
from tests.factories import make_connection
from tests.fakes.otlp_collector import OtlpCollector
from tests.fakes.provider_server import (
    MODEL_SUFFIX,
    ErrorReply,
    TextReply,
    ToolCall,
    ToolCallReply,
)

pytestmark = pytest.mark.django_db(transaction=True)

SPAN_KIND_CLIENT, STATUS_ERROR = 3, 2


@pytest.fixture
def collector():
    collector = OtlpCollector()
    tracing.install_otlp(collector.url, service_name="test")
    yield collector
    tracing.uninstall()
    collector.close()


def test_the_llm_tools_model_call_is_a_child_of_its_tool_span(
    trio, agent, provider_server, collector
):
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url, default_model="claude-test", max_retries=0,
    )  # fmt: skip
    question = {"question": "A secret question?", "connection": "Claude", "max_tokens": 50}
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("l1", "llm", json.dumps(question))]),
        TextReply("Claude answered."),
    )
    provider_server.script("anthropic", TextReply("A secret answer", input_tokens=100))
    run = run_inline(tenant=trio.acme, agent=agent, input="Ask Claude.")
    tracing.uninstall()  # flushes the batch
    assert run.status == "succeeded", run.error

    [tool] = collector.named("execute_tool llm")
    [asked] = collector.named("chat claude-test")
    assert asked.trace_id == tool.trace_id and asked.parent_span_id == tool.span_id
    assert asked.kind == SPAN_KIND_CLIENT
    assert asked.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": "claude-test",
        "gen_ai.request.max_tokens": 50,
        "gen_ai.response.model": "claude-test" + MODEL_SUFFIX,
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ["stop"],
        "agentplatform.connection": "Claude",
        "agentplatform.tenant.id": str(trio.acme.pk),
        "agentplatform.run.id": str(run.pk),
    }
    sent = b"".join(collector.bodies)
    assert b"secret question" not in sent and b"secret answer" not in sent
    assert b"sk-ant-test-key" not in sent


def test_a_failed_llm_call_marks_its_span(trio, agent, provider_server, collector):
    question = {"question": "Anything?"}
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("l1", "llm", json.dumps(question))]),
        ErrorReply(503, "overloaded"),  # the llm tool's call (the default connection)
        TextReply("It failed."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="Ask.")
    tracing.uninstall()
    assert run.status == "succeeded", run.error
    [tool] = collector.named("execute_tool llm")
    asked = [s for s in collector.named("chat gpt-test") if s.parent_span_id == tool.span_id]
    assert len(asked) == 1 and asked[0].status_code == STATUS_ERROR
    assert asked[0].attributes["error.type"] == "ProviderUnavailable"
    assert tool.status_code == STATUS_ERROR and tool.attributes["error.type"] == "tool_error"


def test_the_judges_model_call_is_a_span_with_its_cost(
    trio, connection, provider_server, collector
):
    ModelPrice.objects.create(  # $10 in, $20 out per million tokens
        tenant=trio.acme, provider_kind="openai", model="judge-1", input_price=10,
        output_price=20, cached_input_price=0, cache_write_price=0,
    )  # fmt: skip
    dataset = dataset_save(tenant=trio.acme, changes={"name": "tone", "judge_model": "judge-1"})
    provider_server.script(
        "openai",
        TextReply('{"passed": true, "reason": "kind"}', input_tokens=50, output_tokens=7),
        ErrorReply(500, "overloaded"),
    )
    judged = judge_answer(dataset, rubric="A private rubric.", input="hi", answer="Hello")
    failed = judge_answer(dataset, rubric="A private rubric.", input="hi", answer="Hello")
    tracing.uninstall()
    assert judged.passed is True and failed.passed is None

    ok, broken = collector.named("chat judge-1")
    assert ok.parent_span_id == b"" and ok.kind == SPAN_KIND_CLIENT  # (its own trace)
    assert ok.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "judge-1",
        "gen_ai.request.max_tokens": 400,
        "gen_ai.request.temperature": 0,
        "gen_ai.response.model": "judge-1" + MODEL_SUFFIX,
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 7,
        "agentplatform.tenant.id": str(trio.acme.pk),
        "agentplatform.tenant": "acme",
        "agentplatform.connection": "Local OpenAI",
        "agentplatform.dataset.id": str(dataset.pk),
        "agentplatform.cost_usd": 0.00064,
    }
    assert broken.status_code == STATUS_ERROR
    assert broken.attributes["error.type"] == "ProviderUnavailable"
    assert "agentplatform.cost_usd" not in broken.attributes
    sent = b"".join(collector.bodies)
    assert b"private rubric" not in sent and b"overloaded" not in sent
