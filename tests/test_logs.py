"""JSON log lines (base/logs.py): the run's correlation id on every line logged
while it executes, nothing that looks like a credential."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest

from agents.runs import run_inline
from base.logs import JsonFormatter, masked, run_context
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.fakes.provider_server import ErrorReply


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def record(message: str, *args) -> logging.LogRecord:
    return logging.LogRecord("agents.test", logging.INFO, __file__, 1, message, args, None)


def test_a_line_inside_a_run_carries_its_ids_and_one_outside_does_not():
    formatter = JsonFormatter()
    with run_context(run_id=7, correlation_id="corr-1", tenant_id=3):
        inside = json.loads(formatter.format(record("run %s went %s", 7, "well")))
    outside = json.loads(formatter.format(record("idle")))
    assert inside["message"] == "run 7 went well" and inside["level"] == "INFO"
    assert inside["logger"] == "agents.test" and inside["time"].endswith("+00:00")
    assert (inside["correlation_id"], inside["run_id"], inside["tenant_id"]) == ("corr-1", "7", "3")
    assert "correlation_id" not in outside


def test_a_line_inside_a_traced_run_names_its_trace():
    from opentelemetry.sdk.trace import TracerProvider

    from agents.runtime import tracing

    tracing.install(TracerProvider().get_tracer("test"))
    try:
        with tracing.run_span(agent="a", run_id=1, tenant_id=1, correlation_id="c") as span:
            entry = json.loads(JsonFormatter().format(record("inside")))
            context = span._span.get_span_context()
    finally:
        tracing.uninstall()
    assert entry["trace_id"] == format(context.trace_id, "032x")
    assert entry["span_id"] == format(context.span_id, "016x")
    assert "trace_id" not in json.loads(JsonFormatter().format(record("after")))


def test_what_looks_like_a_credential_is_masked():
    text = "sent Authorization: Bearer abcdef123456 with api_key=sk-live-0123456789abcdef"
    assert masked(text) == "sent Authorization: Bearer [redacted] with api_key=[redacted]"
    assert masked("key sk-ant-api03-0123456789abcdef here") == "key [redacted] here"
    assert masked("nothing to hide, run 12 failed") == "nothing to hide, run 12 failed"


def test_a_real_run_logs_json_lines_with_its_correlation_id(trio, agent, provider_server):
    provider_server.script("openai", ErrorReply(500, "upstream trouble"))
    lines = Lines()
    logger = logging.getLogger("agents")
    logger.addHandler(lines)
    try:
        run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    finally:
        logger.removeHandler(lines)
    assert run.status == "failed"
    entries = [json.loads(line) for line in lines.lines]
    [failed] = [e for e in entries if e["message"].startswith(f"run {run.pk} failed")]
    assert failed["correlation_id"] == run.correlation_id
    assert failed["run_id"] == str(run.pk) and failed["tenant_id"] == str(trio.acme.pk)
    assert not any("sk-test-key" in line for line in lines.lines)


@pytest.mark.integration
def test_log_format_json_makes_the_console_write_json():
    code = (
        "import django, logging; django.setup()\n"
        "from base.logs import run_context\n"
        "with run_context(run_id=1, correlation_id='abc', tenant_id=2):\n"
        "    logging.getLogger('agents.x').warning('hello %s', 'there')\n"
    )
    env = {**subprocess_env(), "LOG_FORMAT": "json"}
    out = processes.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    [line] = [json.loads(x) for x in out.stderr.splitlines() if '"hello there"' in x]
    assert line["correlation_id"] == "abc" and line["level"] == "WARNING"


@pytest.mark.integration
def test_a_celery_worker_writes_json_lines_with_log_format_json(db):
    """The worker sets up its own handlers; they get the JSON formatter too."""
    env = {**subprocess_env(), "LOG_FORMAT": "json"}
    worker = processes.spawn(
        [sys.executable, "-m", "celery", "-A", "agentplatform", "worker", "--pool", "solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
         "-Q", "json-logs-test-queue", "-n", "json-logs-test@%h"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while time.monotonic() < deadline:
            line = worker.stderr.readline()
            if not line:
                break
            lines.append(line)
            if " ready." in line:
                break
    finally:
        worker.terminate()
        worker.wait(15)
    [ready] = [json.loads(x) for x in lines if " ready." in x]
    assert ready["level"] == "INFO" and ready["message"].endswith(" ready.")
