"""The OpenTelemetry tracer of the process and the `chat <model>` span of a model call,
after the GenAI semantic conventions (opentelemetry.io/docs/specs/semconv/gen-ai/).

Here, at the lowest runtime that calls models, because every caller of a model makes this
span: the agent loop, the `llm` built-in (providers.runtime.llm_tool), the evaluation judge
and the gateway (`/v1` with `<connection>/<model>` or `alias/<name>`). The spans of runs
and tool calls (`invoke_agent`, `execute_tool`) are agents.runtime.tracing's, on the same
tracer.

Off unless a tracer is installed (`install`, or `install_otlp` where an OTLP endpoint is
configured: agents.apps does so at start-up). Off, every hook returns one shared do-nothing
span: no span object, no OpenTelemetry call, a few attribute reads per call; the SDK and
the exporter are never imported. On, spans go to the installed tracer only (never the
global provider, so nothing else in the process is traced by surprise), and the batch
processor exports them off the caller's path.

What a span holds: names, ids, models, token counts, costs, statuses and error classes.
Never a prompt, a completion, tool arguments or results, an error's text or a credential
(the conventions make content opt-in; there is no opt-in here).
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_tracer: trace.Tracer | None = None  # installed: tracing is on (one per process)
_provider: Any = None  # the SDK provider install_otlp made, shut down by uninstall

FINISH_REASONS = {"end": "stop", "max_tokens": "length", "stop_sequence": "stop"}
_W3C = TraceContextTextMapPropagator()  # W3C Trace Context: `traceparent`, `tracestate`
_MAX_TRACESTATE = 512  # (the spec's 32 members fit; a longer one is dropped, not parsed)


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


def span(
    name: str, kind: SpanKind, attributes: dict[str, Any], *, traceparent: str = ""
) -> Span | _Off:
    """A span of `name` (OFF when tracing is off), not yet started: `with` it (current
    inside), or `begin` and `end` it (never current: for one that outlives its caller's
    frame, as a gateway stream's does). Its parent is the span `traceparent` names when
    that is valid, else the current span (if any)."""
    if _tracer is None:
        return _OFF
    return Span(name, kind, attributes, caller_context(traceparent) if traceparent else None)


# -- a caller's trace ----------------------------------------------------------------------
# A caller that sends W3C Trace Context (`traceparent`; OpenTelemetry's HTTP client
# instrumentations do) gets its request's spans in its own trace: the web process makes the
# caller's span current for the request (agentplatform.trace_context), and a run records the
# current span's `traceparent` so the process that executes it later continues that trace.
def caller_context(traceparent: str, tracestate: str = "") -> otel_context.Context | None:
    """The context whose (remote) span is the one `traceparent` names; None when tracing
    is off or the value is not a valid traceparent (the spans then start a trace of their
    own: a caller's bad header never fails its request)."""
    if _tracer is None or not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    if tracestate and len(tracestate) <= _MAX_TRACESTATE:
        carrier["tracestate"] = tracestate
    context = _W3C.extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def current_traceparent() -> str:
    """The `traceparent` of the current span (the caller's or one of ours), "" when there
    is none or tracing is off: what a run keeps for the process that executes it."""
    if _tracer is None:
        return ""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent", "")


# -- the chat span -----------------------------------------------------------------------
def chat_span(
    *,
    provider: str,
    model: str,
    tenant_id: int | str,
    run_id: int | str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    **more: Any,
) -> Span | _Off:
    """`chat <model>` around one model call (`record` or `answered` its outcome on it).
    `more`: further attributes (dots spelled `__`), None ones left out."""
    if _tracer is None:
        return _OFF
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the name before semantic conventions 1.37
        "gen_ai.request.model": model,
        "agentplatform.tenant.id": str(tenant_id),
    }
    if run_id is not None:
        attributes["agentplatform.run.id"] = str(run_id)
    for name, value in (
        ("gen_ai.request.max_tokens", max_tokens),
        ("gen_ai.request.temperature", temperature),
        ("gen_ai.request.top_p", top_p),
        *((name.replace("__", "."), value) for name, value in more.items()),
    ):
        if value is not None:
            attributes[name] = value
    return Span(f"chat {model}", SpanKind.CLIENT, attributes)


def model_span(provider: str, request: Any, ctx: Any) -> Span | _Off:
    """`chat <model>` around one call of a ModelRequest for a RunContext's run; `record`
    the ModelResponse on it."""
    if _tracer is None:
        return _OFF
    return chat_span(
        provider=provider,
        model=request.model,
        tenant_id=ctx.tenant_id,
        run_id=ctx.run_id,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
    )


def annotate(**attributes: Any) -> None:
    """Attributes for the current span, known once it is under way (the model a run
    resolved to, its outcome); None values are skipped. A `gen_ai.agent.name` renames an
    `invoke_agent` span after it (a crew's is read after its span starts)."""
    if _tracer is None:
        return
    current = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            current.set_attribute(name, value)
    if agent := attributes.get("gen_ai.agent.name"):
        current.update_name(f"invoke_agent {agent}")


def fail_current(error_type: str) -> None:
    """Mark the current span failed, with `error_type` (a class of error, never a text)."""
    if _tracer is None:
        return
    current = trace.get_current_span()
    current.set_attribute("error.type", error_type)
    current.set_status(Status(StatusCode.ERROR))


class _Off:
    """Tracing off: one shared instance does nothing."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def begin(self) -> _Off:
        return self

    def end(self, end_time_ns: int | None = None) -> None:
        return None

    def record(self, outcome: Any) -> None:
        return None

    def answered(self, model: str, usage: Any, finish_reason: str | None = None) -> None:
        return None

    def set(self, **attributes: Any) -> None:
        return None

    def fail(self, error_type: str) -> None:
        return None

    def __bool__(self) -> bool:  # (whether there is a span to finish)
        return False


_OFF = _Off()
OFF = _OFF  # for callers that choose not to trace something


class Span:
    """A span: current between enter and exit, or started by `begin` and ended by `end`
    (never current). An exception marks it failed with the exception's class only (its
    text may quote anything)."""

    __slots__ = ("_attributes", "_kind", "_name", "_parent", "_span", "_token")

    def __init__(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        parent: otel_context.Context | None = None,
    ) -> None:
        self._name, self._kind, self._attributes = name, kind, attributes
        self._parent = parent  # None: the current span's child (or a root)

    def begin(self) -> Span:
        self._span = _tracer.start_span(
            self._name, context=self._parent, kind=self._kind, attributes=self._attributes
        )
        return self

    def end(self, end_time_ns: int | None = None) -> None:
        self._span.end(end_time=end_time_ns)

    def __enter__(self) -> Span:
        self.begin()
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
        if getattr(outcome, "usage", None) is not None:
            reason = FINISH_REASONS.get(outcome.stop_reason, outcome.stop_reason)
            self.answered(outcome.model, outcome.usage, reason)
        elif getattr(outcome, "error", None) is not None:
            self._fail("rate_limited" if outcome.rate_limited is not None else "tool_error")

    def answered(self, model: str, usage: Any, finish_reason: str | None = None) -> None:
        """What the provider said it used (`model`, a Usage) and why it stopped."""
        span = self._span
        span.set_attribute("gen_ai.response.model", model or "")
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if usage.cache_read_tokens:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
        if usage.cache_write_tokens:
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
        if finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])

    def fail(self, error_type: str) -> None:
        self._fail(error_type)

    def _fail(self, error_type: str) -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR))


def now_ns() -> int:
    """A span's end time, for one ended later than its call (`end(now_ns())`)."""
    return time.time_ns()
