"""A caller's W3C Trace Context (agentplatform/trace_context.py): the spans of its request
join its trace — a gateway call's `chat`, a `/v1` agent run's `invoke_agent` — through the
real server process (uvicorn) exporting to the loopback collector stand-in, with the real
`openai` SDK sending the header; a run started inside a caller's trace and executed
later, elsewhere, continues it; a malformed header starts a trace of our own."""

from __future__ import annotations

import pytest
from opentelemetry import context as otel_context

from agents.models import Run
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.runtime import tracing
from providers.runtime.tracing import caller_context
from tests.api.conftest import sdk
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


def test_a_gateway_call_joins_its_callers_trace(
    trio, traced_server, keys, connection, provider_server, collector
):
    provider_server.script("openai", TextReply("Traced."), TextReply("Untraced."))
    client = sdk(traced_server, keys["run"])
    client.chat.completions.create(
        model="local-openai/gpt-test",
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"traceparent": TRACEPARENT, "tracestate": "vendor=opaque"},
    )
    [chat] = collector.wait_for("chat gpt-test")
    assert chat.trace_id.hex() == TRACE_ID
    assert chat.parent_span_id.hex() == CALLER_SPAN

    # Not a traceparent (a wrong length, a zero trace id): answered as ever, in a new trace.
    for bad in ("00-abc-def-01", f"00-{'0' * 32}-{CALLER_SPAN}-01"):
        provider_server.script("openai", TextReply("Untraced."))
        answer = client.chat.completions.create(
            model="local-openai/gpt-test",
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers={"traceparent": bad},
        )
        assert answer.choices[0].message.content == "Untraced."
    untraced = collector.wait_for("chat gpt-test", count=3)[1:]
    for span in untraced:
        assert span.trace_id.hex() != TRACE_ID and span.parent_span_id == b""


def test_an_agent_run_on_v1_joins_its_callers_trace(
    trio, agent, traced_server, keys, provider_server, collector
):
    provider_server.script("openai", TextReply("Hello from the agent."))
    client = sdk(traced_server, keys["run"])
    answer = client.chat.completions.create(
        model="assistant",
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"traceparent": TRACEPARENT},
    )
    assert answer.choices[0].message.content == "Hello from the agent."
    [run_span] = collector.wait_for("invoke_agent assistant")
    [chat] = collector.wait_for("chat gpt-test")
    assert run_span.trace_id.hex() == chat.trace_id.hex() == TRACE_ID
    assert run_span.parent_span_id.hex() == CALLER_SPAN
    assert chat.parent_span_id == run_span.span_id
    run = Run.objects.get(agent=agent)
    assert run.traceparent == TRACEPARENT  # (kept for a process that resumes it)


@pytest.fixture
def local_collector(collector):
    tracing.install_otlp(collector.url, service_name="agent-platform-test")
    yield collector
    tracing.uninstall()


def test_a_run_started_in_a_trace_continues_it_wherever_it_executes(
    trio, agent, provider_server, local_collector
):
    provider_server.script("openai", TextReply("Later."))
    token = otel_context.attach(caller_context(TRACEPARENT))
    try:
        run = run_start(tenant=trio.acme, agent=agent, input="Hi", enqueue=False)
    finally:
        otel_context.detach(token)
    # Executed outside the caller's context, as a worker executes it.
    execute_run(run.pk)
    tracing.uninstall()  # flushes the batch
    [run_span] = local_collector.named("invoke_agent assistant")
    assert run_span.trace_id.hex() == TRACE_ID
    assert run_span.parent_span_id.hex() == CALLER_SPAN

    # Started outside any trace, a run's span is a root of its own.
    assert run_start(tenant=trio.acme, agent=agent, input="Hi", enqueue=False).traceparent == ""
