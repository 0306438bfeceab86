"""A run worker killed with 50 runs in flight, in the scaled-out deployment of
tests/test_scale_out.py (two web processes, run workers, one beat; PostgreSQL and Redis
outside them): beat's sweeper finds the expired leases, the other worker resumes every
run from its checkpoint, and no write is sent twice.

Each run asks the model, gets a call to `place_order` (a non-idempotent POST to a local
server counting requests per run), records its result, and asks the model again, which
takes TEXT_DELAY_S: the kill lands while all 50 wait for that answer on one worker.
"""

# ruff: noqa: F811  (the fixtures imported from the modules that define them)
from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from agents.models import Run, RunEvent
from tests.agents.test_durability import (  # noqa: F401  (orders, trusted_agent: fixtures)
    orders,
    posts_by_run,
    trusted_agent,
    wait_until,
)
from tests.agents.workers import TurnTakingProviderServer
from tests.test_scale_out import deployment, key  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RUNS = 50
LEASE_S = 3
# Long enough that no answer comes before all 50 runs have recorded their call, even on a
# busy machine (with 3 s, one run once finished first).
TEXT_DELAY_S = 10.0


@pytest.fixture
def provider_server() -> Iterator[TurnTakingProviderServer]:
    server = TurnTakingProviderServer(
        tool_name="place_order", arguments={"item": "widget"}, text_delay_s=TEXT_DELAY_S
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def settings_for_takeover(settings, monkeypatch):
    """Short leases and a sweep every second, for every process of the deployment."""
    monkeypatch.setenv("RUN_LEASE_S", str(LEASE_S))
    monkeypatch.setenv("RUN_SWEEP_S", "1")
    settings.RUN_LEASE_S = LEASE_S


def in_flight_on_tool_result(run_ids: list[int]) -> bool:
    """Every run has recorded its tool result and is waiting for the model's answer."""
    done = RunEvent.objects.filter(run_id__in=run_ids, type="tool.completed").count()
    return done == len(run_ids)


def test_a_worker_killed_with_50_runs_in_flight_hands_all_of_them_to_another_writing_once(
    settings_for_takeover,
    trio,
    trusted_agent,
    orders,
    key,
    provider_server,
    deployment,
):
    first, second = deployment.workers
    deployment.fleet.kill(second)  # every run goes to the first worker
    web = deployment.webs[0].base
    with httpx2.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
        run_ids = []
        for i in range(RUNS):
            answer = client.post(
                f"{web}/api/v1/runs", json={"agent": "assistant", "input": f"Order {i}."}
            )
            assert answer.status_code == 201, answer.text
            run_ids.append(answer.json()["id"])
    wait_until(lambda: in_flight_on_tool_result(run_ids), 60, "all runs to record their call")
    held = Run.objects.filter(pk__in=run_ids, status="running").count()
    assert held == RUNS  # all in flight at once on one worker process group
    assert posts_by_run(orders) == dict.fromkeys(run_ids, 1)

    successor = deployment.start_worker(3)
    deployment.fleet.kill(first)
    wait_until(
        lambda: Run.objects.filter(pk__in=run_ids, finished_at__isnull=False).count() == RUNS,
        90,
        "the other worker to finish every run",
    )

    runs = list(Run.objects.filter(pk__in=run_ids))
    assert {run.status for run in runs} == {"succeeded"}, [(r.pk, r.error) for r in runs]
    assert {run.attempts for run in runs} == {2}  # claimed by the dead worker, then once more
    assert posts_by_run(orders) == dict.fromkeys(run_ids, 1)  # no write sent twice
    for run in runs:
        types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
        assert types.count("tool.started") == types.count("tool.completed") == 1
        assert types[-1] == "run.completed"
    resumed_by = {
        e["group"]
        for e in deployment.executions("agents.execute_run")
        if e["args"][0] in run_ids and e["group"] != first.pid
    }
    assert resumed_by == {successor.pid}
    assert deployment.beat.poll() is None
