"""Many declared workflow runs at once whose agent step talks to a slow model: the engine holds
them in one event loop, as a runs worker does (agents.runs.worker), so they wait on the model
together, never on each other. Every run finishes, every step is recorded once, each run's
model call carries its own value, and the whole takes a small multiple of one run."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from agents import runs
from agents.models import RunEvent, WorkflowDefinition
from agents.runs import bridge, execute_run_async
from tests.factories import make_agent, make_connection
from tests.fakes.provider_server import ProviderServer

pytestmark = pytest.mark.django_db

RUNS = 24
LATENCY_S = 1.0  # every chat answer takes this long (a real model's latency)
WORKFLOW = {
    "input": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    "steps": [
        {
            "id": "total",
            "tool": "calculator",
            "arguments": {"expression": "join('', [to_string(input.n), '*2'])"},
        },
        {"id": "prompt", "transform": "join(' ', ['The total is', to_string(total.result)])"},
        {"id": "answer", "agent": "explainer", "prompt": "prompt"},
    ],
}
PATHS = {"0", "1", "2", "3", "4"}  # input, the three steps, output


@pytest.fixture
def slow_model(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = ProviderServer(latency_s=LATENCY_S)
    try:
        yield server
    finally:
        server.close()


def test_many_workflow_runs_wait_on_a_slow_model_together_not_on_each_other(trio, slow_model):
    make_connection(
        trio.acme, "Slow OpenAI", "openai", api_key="sk-test", base_url=slow_model.openai_base_url,
        default_model="gpt-test", is_default=True, max_retries=0,
    )  # fmt: skip
    make_agent(trio.acme, "explainer", instructions="Say the total in words.")
    workflow = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="explain", name="Explain", definition=WORKFLOW
    )

    def start(n: int):
        return runs.workflow_start(tenant=trio.acme, workflow=workflow, input={"n": n},
                                   initiated_by=trio.alice, enqueue=False)  # fmt: skip

    async def together(started) -> list[str]:
        return list(await asyncio.gather(*(execute_run_async(run.pk) for run in started)))

    alone = start(1000)
    began = time.perf_counter()
    assert bridge.call(together, [alone]) == ["succeeded"]
    one_run_s = time.perf_counter() - began
    slow_model.max_in_flight = 0

    started = [start(n) for n in range(RUNS)]
    began = time.perf_counter()
    statuses = bridge.call(together, started)
    wall_s = time.perf_counter() - began

    assert statuses == ["succeeded"] * RUNS
    # One after another they would take RUNS model latencies; together, about one.
    assert wall_s < 4 * one_run_s, (wall_s, one_run_s)
    assert slow_model.max_in_flight > RUNS // 2  # their model calls overlapped
    # Each step recorded once per run, and each run's model call carried its own value.
    for run in started:
        completed = Counter(
            RunEvent.objects.filter(run=run, type="workflow.step.completed").values_list(
                "payload__path", flat=True
            )
        )
        assert completed == dict.fromkeys(PATHS, 1), (run.pk, completed)
        run.refresh_from_db()
        assert run.status == "succeeded" and run.output == "ok"
    calls = slow_model.requests_to("/v1/chat/completions")
    asked = Counter(call.body["messages"][-1]["content"] for call in calls)
    expected = {f"The total is {n * 2}" for n in (*range(RUNS), 1000)}
    assert asked == dict.fromkeys(expected, 1)
