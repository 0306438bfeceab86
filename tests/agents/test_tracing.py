"""Spans of a real run (agents/runtime/tracing.py), exported over OTLP/HTTP to a collector
stand-in on loopback, and nothing at all when no endpoint is configured."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from agents.apps import start_tracing
from agents.runs import run_inline
from agents.runtime import tracing
from providers.models import ModelPrice
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_agent, make_crew
from tests.fakes.otlp_collector import OtlpCollector
from tests.fakes.provider_server import MODEL_SUFFIX, ErrorReply, TextReply, ToolCall, ToolCallReply

SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT = 1, 3
STATUS_ERROR = 2


@pytest.fixture
def collector():
    collector = OtlpCollector()
    yield collector
    tracing.uninstall()
    collector.close()


def test_a_run_with_a_tool_call_is_traced_after_the_genai_conventions(
    trio, agent, provider_server, collector
):
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("c1", "calculator", '{"expression": "6*7"}')],
            input_tokens=20,
            output_tokens=5,
        ),
        TextReply("The product is forty-two.", input_tokens=30, output_tokens=4),
    )
    ModelPrice.objects.create(  # $10 in, $20 out per million tokens: the run costs $0.00068
        tenant=trio.acme, provider_kind="openai", model="gpt-test", input_price=10,
        output_price=20, cached_input_price=0, cache_write_price=0,
    )  # fmt: skip
    tracing.install_otlp(collector.url, service_name="agent-platform-test")
    run = run_inline(tenant=trio.acme, agent=agent, input="What is 6 times 7, confidentially?")
    tracing.uninstall()  # flushes the batch
    assert run.status == "succeeded"

    assert set(collector.paths) == {"/v1/traces"}
    [root] = collector.named("invoke_agent assistant")
    chats = collector.named("chat gpt-test")
    [tool] = collector.named("execute_tool calculator")
    assert len(chats) == 2 and len(collector.spans) == 4
    assert root.resource["service.name"] == "agent-platform-test"
    assert root.kind == SPAN_KIND_INTERNAL and root.parent_span_id == b""
    assert root.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "assistant",
        "gen_ai.agent.id": str(agent.pk),
        "gen_ai.request.model": "gpt-test",
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 9,
        "agentplatform.run.id": str(run.pk),
        "agentplatform.tenant.id": str(trio.acme.pk),
        "agentplatform.tenant": "acme",
        "agentplatform.correlation_id": run.correlation_id,
        "agentplatform.run.status": "succeeded",
        "agentplatform.cost_usd": 0.00068,
    }
    for span in (*chats, tool):  # one trace, under the run's span
        assert span.trace_id == root.trace_id and span.parent_span_id == root.span_id
        assert span.attributes["agentplatform.run.id"] == str(run.pk)
        assert span.attributes["agentplatform.tenant.id"] == str(trio.acme.pk)
    first, second = sorted(chats, key=lambda s: s.attributes["gen_ai.usage.input_tokens"])
    assert first.kind == SPAN_KIND_CLIENT
    assert {k: v for k, v in first.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.request.max_tokens": first.attributes["gen_ai.request.max_tokens"],
        "gen_ai.response.model": "gpt-test" + MODEL_SUFFIX,
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ["tool_calls"],
    }
    assert second.attributes["gen_ai.usage.input_tokens"] == 30
    assert second.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "calculator"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert tool.status_code != STATUS_ERROR
    # No prompt, arguments, result or answer anywhere in what was sent (strings long enough
    # not to turn up by chance in the binary ids and timestamps).
    sent = b"".join(collector.bodies)
    for content in (b"confidentially", b"expression", b'"result"', b"forty-two", b"Be brief"):
        assert content not in sent
    assert b"sk-test-key" not in sent


def test_a_failed_tool_and_a_failed_model_call_mark_their_spans(
    trio, agent, provider_server, collector
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "1/0"}')]),
        ErrorReply(500, "the provider broke"),
    )
    tracing.install_otlp(collector.url, service_name="t")
    run = run_inline(tenant=trio.acme, agent=agent, input="1/0?")
    tracing.uninstall()
    assert run.status == "failed"
    [tool] = collector.named("execute_tool calculator")
    assert tool.status_code == STATUS_ERROR and tool.attributes["error.type"] == "tool_error"
    failed = [s for s in collector.named("chat gpt-test") if s.status_code == STATUS_ERROR]
    assert len(failed) == 1 and failed[0].attributes["error.type"] == "ProviderUnavailable"
    [root] = collector.named("invoke_agent assistant")
    assert root.status_code == STATUS_ERROR and root.attributes["error.type"] == "failed"
    assert b"the provider broke" not in b"".join(collector.bodies)


def test_a_crews_member_runs_nest_in_the_crews_trace(trio, connection, provider_server, collector):
    researcher = make_agent(trio.acme, "researcher", instructions="Research.")
    writer = make_agent(trio.acme, "writer", instructions="Write.")
    crew = make_crew(trio.acme, "team", [researcher, writer], name="Team", mode="sequential")
    provider_server.script("openai", TextReply("Facts."), TextReply("Prose."))
    tracing.install_otlp(collector.url, service_name="t")
    run = run_inline(tenant=trio.acme, crew=crew, input="Explain boiling.")
    tracing.uninstall()
    assert run.status == "succeeded"
    [root] = collector.named("invoke_agent team")  # renamed once the crew was read
    assert root.attributes["gen_ai.agent.name"] == "team" and root.parent_span_id == b""
    members = collector.named("invoke_agent researcher") + collector.named("invoke_agent writer")
    assert len(members) == 2
    for member in members:
        assert member.trace_id == root.trace_id and member.parent_span_id == root.span_id
        assert member.attributes["agentplatform.run.parent_id"] == str(run.pk)
        assert member.attributes["agentplatform.correlation_id"] == run.correlation_id
    assert len(collector.named("chat gpt-test")) == 2


def test_a_collector_that_is_down_costs_runs_nothing(trio, agent, provider_server, monkeypatch):
    closed = OtlpCollector()
    closed.close()  # nothing listens at its address now
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    tracing.install_otlp(closed.url, service_name="t")
    try:
        started = time.monotonic()
        run = run_inline(tenant=trio.acme, agent=agent, input="hi")
        took = time.monotonic() - started
    finally:
        tracing.uninstall()
    assert run.status == "succeeded" and took < 5


def test_without_an_endpoint_nothing_is_installed_or_sent(
    trio, agent, provider_server, collector, settings
):
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = ""
    start_tracing()
    assert not tracing.enabled()
    assert tracing.model_span("openai", None, None) is tracing.OFF  # hooks do nothing
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded" and collector.bodies == []


def test_the_endpoint_setting_installs_the_exporter(collector, settings):
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = collector.url
    start_tracing()
    assert tracing.enabled()


@pytest.mark.integration
def test_a_process_without_an_endpoint_never_loads_the_exporter():
    code = (
        "import sys, django; django.setup()\n"
        "from agents.runtime import tracing\n"
        "print(tracing.enabled(), 'opentelemetry.exporter.otlp.proto.http' in sys.modules)\n"
    )
    env = {**subprocess_env(), "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False False", out.stderr
