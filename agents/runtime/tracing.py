"""OpenTelemetry spans of runs, model calls and tool calls, after the GenAI semantic
conventions (opentelemetry.io/docs/specs/semconv/gen-ai/): `invoke_agent <agent>`,
`chat <model>`, `execute_tool <tool>`.

Off unless a tracer is installed (`install`, or `install_otlp` where an OTLP endpoint is
configured: agents.apps does so at start-up). Off, every hook returns one shared do-nothing
context manager: no span object, no OpenTelemetry call, a few attribute reads per call. On,
spans go to the installed tracer only (never the global provider, so nothing else in the
process is traced by surprise), and the batch processor exports them off the run's path.

What a span holds: names, ids, models, token counts, statuses and error classes. Never a
prompt, a completion, tool arguments or results, an error's text or a credential (the
conventions make content opt-in; this module has no opt-in).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

_tracer: trace.Tracer | None = None  # installed: tracing is on (one per process)
_provider: Any = None  # the SDK provider install_otlp made, shut down by uninstall

FINISH_REASONS = {"end": "stop", "max_tokens": "length", "stop_sequence": "stop"}


def install(tracer: trace.Tracer) -> None:
    """Trace with `tracer` from now on (tests install one over an in-memory or loopback
    exporter)."""
    global _tracer
    _tracer = tracer


def install_otlp(endpoint: str, *, service_name: str, headers: dict[str, str] | None = None):
    """An SDK tracer provider exporting over OTLP/HTTP (protobuf) to `endpoint` (the
    collector's base URL; `/v1/traces` is added), in batches on a background thread. The
    SDK and exporter are imported here only, so a process without an endpoint loads
    neither."""
    global _provider
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    uninstall()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", headers=headers)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _provider = provider
    install(provider.get_tracer("agentplatform"))
    return provider


def uninstall() -> None:
    """Tracing off; what install_otlp started is flushed and stopped."""
    global _tracer, _provider
    _tracer = None
    if _provider is not None:
        provider, _provider = _provider, None
        provider.shutdown()


def enabled() -> bool:
    return _tracer is not None


# -- the hooks -------------------------------------------------------------------------
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
):
    """`invoke_agent <agent>` around one execution of a run (a resumed run has one per
    execution, all with its run and correlation ids)."""
    if _tracer is None:
        return _OFF
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
    return _Span(f"invoke_agent {agent}", SpanKind.INTERNAL, attributes)


def model_span(provider: str, request: Any, ctx: Any):
    """`chat <model>` around one model call (a ModelRequest, the run's RunContext); `record`
    the ModelResponse on it."""
    if _tracer is None:
        return _OFF
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the name before semantic conventions 1.37
        "gen_ai.request.model": request.model,
        "gen_ai.request.max_tokens": request.max_tokens,
        **_run_ids(ctx),
    }
    if request.temperature is not None:
        attributes["gen_ai.request.temperature"] = request.temperature
    if request.top_p is not None:
        attributes["gen_ai.request.top_p"] = request.top_p
    return _Span(f"chat {request.model}", SpanKind.CLIENT, attributes)


def tool_span(call: Any, ctx: Any):
    """`execute_tool <tool>` around one tool execution (a ToolCall); `record` the
    ToolResult on it."""
    if _tracer is None:
        return _OFF
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        **_run_ids(ctx),
    }
    return _Span(f"execute_tool {call.name}", SpanKind.INTERNAL, attributes)


def annotate(**attributes: Any) -> None:
    """Attributes for the current span, known once it is under way (the model a run
    resolved to, its outcome); None values are skipped. A `gen_ai.agent.name` renames an
    `invoke_agent` span after it (a crew's is read after its span starts)."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            span.set_attribute(name, value)
    if agent := attributes.get("gen_ai.agent.name"):
        span.update_name(f"invoke_agent {agent}")


def fail_current(error_type: str) -> None:
    """Mark the current span failed, with `error_type` (a class of error, never a text)."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR))


def _run_ids(ctx: Any) -> dict[str, str]:
    ids = {"agentplatform.tenant.id": str(ctx.tenant_id)}
    if ctx.run_id is not None:
        ids["agentplatform.run.id"] = str(ctx.run_id)
    return ids


class _Off:
    """Tracing off: one shared instance does nothing."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def record(self, outcome: Any) -> None:
        return None

    def set(self, **attributes: Any) -> None:
        return None

    def fail(self, error_type: str) -> None:
        return None


_OFF = _Off()
OFF = _OFF  # for callers that choose not to trace something


class _Span:
    """A span that is current between enter and exit. An exception marks it failed with
    the exception's class only (its text may quote anything)."""

    __slots__ = ("_attributes", "_kind", "_name", "_span", "_token")

    def __init__(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> None:
        self._name, self._kind, self._attributes = name, kind, attributes

    def __enter__(self) -> _Span:
        self._span = _tracer.start_span(self._name, kind=self._kind, attributes=self._attributes)
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(self, kind, exc, traceback) -> None:
        try:
            if exc is not None:
                self._fail(type(exc).__qualname__)
        finally:
            otel_context.detach(self._token)
            self._span.end()

    def set(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            if value is not None:
                self._span.set_attribute(name, value)

    def record(self, outcome: Any) -> None:
        """A ModelResponse (usage, resolved model, finish reason) or a ToolResult (failed
        or not)."""
        span = self._span
        usage = getattr(outcome, "usage", None)
        if usage is not None:
            span.set_attribute("gen_ai.response.model", outcome.model or "")
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            if usage.cache_read_tokens:
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
            if usage.cache_write_tokens:
                span.set_attribute(
                    "gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens
                )
            reason = FINISH_REASONS.get(outcome.stop_reason, outcome.stop_reason)
            span.set_attribute("gen_ai.response.finish_reasons", [reason])
        elif getattr(outcome, "error", None) is not None:
            self._fail("rate_limited" if outcome.rate_limited is not None else "tool_error")

    def fail(self, error_type: str) -> None:
        self._fail(error_type)

    def _fail(self, error_type: str) -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR))
