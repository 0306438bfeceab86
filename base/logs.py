"""JSON log lines (LOG_FORMAT=json) that carry the run being executed.

`run_context` marks the code of one run execution (agents.runs.engine sets it): every record
logged inside it, in that task or the tasks it starts, carries the run's correlation id,
run id and tenant id. `JsonFormatter` writes one JSON object per record; the plain format
stays the default. The formatter adds no request data, headers or settings, and masks what
looks like a credential in a message (a bearer token, an `sk-`/`ap_` key) as a last guard:
the code logs no secrets, and this keeps a mistake out of log storage.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

from opentelemetry import trace

_run: ContextVar[dict[str, str] | None] = ContextVar("agentplatform_log_run", default=None)

_CREDENTIAL = re.compile(
    r"(?i)(bearer\s+|api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{6,}"
    r"|\b(?:sk|ap|pk|rk)[-_][A-Za-z0-9_-]{12,}"
)


@contextmanager
def run_context(*, run_id: int | str, correlation_id: str, tenant_id: int | str) -> Iterator[None]:
    """Records logged inside carry these (a nested run's replace them until it ends)."""
    token = _run.set(
        {"correlation_id": correlation_id, "run_id": str(run_id), "tenant_id": str(tenant_id)}
    )
    try:
        yield
    finally:
        _run.reset(token)


def current_run() -> dict[str, str] | None:
    return _run.get()


def masked(text: str) -> str:
    return _CREDENTIAL.sub(lambda m: (m.group(1) or "") + "[redacted]", text)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the run's ids when inside
    `run_context`, the trace and span ids when a span is current (tracing on), and the
    exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": masked(record.getMessage()),
        }
        if run := _run.get():
            entry.update(run)
        span = trace.get_current_span().get_span_context()
        if span.is_valid:  # tracing is on: the line leads to its trace
            entry["trace_id"] = format(span.trace_id, "032x")
            entry["span_id"] = format(span.span_id, "016x")
        if record.exc_info:
            entry["exception"] = masked(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def use_json(logger: logging.Logger) -> None:
    """Give `logger`'s handlers the JSON formatter (Celery's worker configures its own
    loggers; agentplatform.celery calls this on them when LOG_FORMAT=json)."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())
