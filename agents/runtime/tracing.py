"""OpenTelemetry spans of runs and tool calls, after the GenAI semantic conventions
(opentelemetry.io/docs/specs/semconv/gen-ai/): `invoke_agent <agent>`, `execute_tool
<tool>`; and, from providers.runtime.tracing (the process's tracer, lower down because
every caller of a model makes it), `chat <model>`.

Off unless a tracer is installed (`install`, or `install_otlp` where an OTLP endpoint is
configured: agents.apps does so at start-up). Off, every hook returns one shared do-nothing
context manager: no span object, no OpenTelemetry call, a few attribute reads per call.

What a span holds: names, ids, models, token counts, statuses and error classes. Never a
prompt, a completion, tool arguments or results, an error's text or a credential (the
conventions make content opt-in; this module has no opt-in).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import SpanKind

from providers.runtime.tracing import (
    FINISH_REASONS,
    OFF,
    annotate,
    current_traceparent,
    enabled,
    fail_current,
    install,
    install_otlp,
    model_span,
    span,
    uninstall,
)

__all__ = [
    "FINISH_REASONS",
    "OFF",
    "annotate",
    "current_traceparent",
    "enabled",
    "fail_current",
    "install",
    "install_otlp",
    "model_span",
    "run_span",
    "tool_span",
    "uninstall",
]


def run_span(
    *,
    agent: str,
    run_id: int | str,
    tenant_id: int | str,
    correlation_id: str,
    agent_id: int | str | None = None,
    tenant: str = "",
    conversation_id: int | str | None = None,
    parent_run_id: int | str | None = None,
    traceparent: str = "",
):
    """`invoke_agent <agent>` around one execution of a run (a resumed run has one per
    execution, all with its run and correlation ids), in the trace of the span its starter
    was in (`traceparent`, recorded with the run) when there was one."""
    if not enabled():
        return OFF
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "agentplatform.run.id": str(run_id),
        "agentplatform.tenant.id": str(tenant_id),
        "agentplatform.correlation_id": correlation_id,
    }
    if agent_id is not None:
        attributes["gen_ai.agent.id"] = str(agent_id)
    if tenant:
        attributes["agentplatform.tenant"] = tenant
    if conversation_id is not None:
        attributes["gen_ai.conversation.id"] = str(conversation_id)
    if parent_run_id is not None:
        attributes["agentplatform.run.parent_id"] = str(parent_run_id)
    return span(f"invoke_agent {agent}", SpanKind.INTERNAL, attributes, traceparent=traceparent)


def tool_span(call: Any, ctx: Any):
    """`execute_tool <tool>` around one tool execution (a ToolCall); `record` the
    ToolResult on it. A tool that calls a model (the `llm` built-in) makes its `chat` span
    inside, as this one's child."""
    if not enabled():
        return OFF
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        "agentplatform.tenant.id": str(ctx.tenant_id),
    }
    if ctx.run_id is not None:
        attributes["agentplatform.run.id"] = str(ctx.run_id)
    return span(f"execute_tool {call.name}", SpanKind.INTERNAL, attributes)
