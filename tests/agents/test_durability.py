"""Durable runs under kill -9: real prefork Celery workers, killed with their pool children.

A killed worker's run keeps its lease until it expires (RUN_LEASE_S=2 here); the sweeper
then queues it again and another worker resumes it from its last checkpoint. A run whose
message the dead worker had taken but not claimed yet stays queued until the sweeper asks
for it again (after two leases).

The side effect under test is a non-idempotent HTTP POST to a local server that counts
requests (per run, by the Idempotency-Key header "<run id>:<call id>"): a call with a
recorded result is never sent again, and a call interrupted in flight is not repeated
either (the model is told its outcome is unknown).

Run tasks go to a queue of each test's own, not the session's: the session-scoped
`celery_worker_process` (a solo worker other tests start) would otherwise take runs and
survive every kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import psutil
import pytest
from django.utils import timezone

from agentplatform.celery import app
from agentplatform.tasks import ping
from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runtime.spec import RunStatus
from agents.tasks import execute_run_task, sweep_stale_runs
from tests.agents.workers import (
    TASK_LOG_ENV,
    TurnTakingProviderServer,
    Worker,
    WorkerFleet,
    forget_queue,
    run_ids_at_broker,
)
from tests.conftest import subprocess_env
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEASE_S = 2
ORDER_CREATED = {"order": "created"}
UNKNOWN_OUTCOME = "the outcome of this call is unknown"
TERMINAL = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.MAX_ROUNDS}


@pytest.fixture
def provider_server() -> Iterator[TurnTakingProviderServer]:
    """Replaces the scripted server: concurrent runs each get a call, then a text."""
    server = TurnTakingProviderServer(tool_name="place_order", arguments={"item": "widget"})
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def orders(trio) -> Iterator[LocalServer]:
    """acme's `place_order`: a POST that creates an order each time it is sent."""
    server = LocalServer()
    server.route("POST", "/orders", Reply(status=201, json=ORDER_CREATED))
    ToolDefinition.objects.create(
        tenant=trio.acme,
        name="place_order",
        description="Place an order.",
        kind="http",
        input_schema={
            "type": "object",
            "properties": {"item": {"type": "string"}},
            "required": ["item"],
        },
        config={"method": "POST", "url": server.url + "/orders"},
        effect="write",
        idempotent=False,
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def trusted_agent(agent):
    agent.approval_policy = "never"  # the write runs without parking for a human
    agent.save()
    return agent


@pytest.fixture
def run_queue(settings) -> Iterator[str]:
    """A queue only this test's workers consume; runs are sent there (agents.tasks.send_run:
    run_start's on-commit hook and the sweeper both send to RUNS_QUEUE)."""
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-durability-{uuid.uuid4().hex[:6]}"
    settings.RUNS_QUEUE = queue
    try:
        yield queue
    finally:
        with app.connection_for_write() as broker:
            forget_queue(broker, queue)


@pytest.fixture
def fleet(db, run_queue, settings) -> Iterator[WorkerFleet]:
    settings.RUN_LEASE_S = LEASE_S  # the sweeper (called in this process) agrees with workers
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    env.update(RUN_LEASE_S=str(LEASE_S), RUN_DRAIN_S="1", EGRESS_ALLOWLIST="127.0.0.1/32")
    workers = WorkerFleet(queue=run_queue, env=env, concurrency=2)
    try:
        yield workers
    finally:
        workers.stop_all()
        assert workers.leftovers() == []


def holding(fleet: WorkerFleet, run_ids: list[int]) -> list:
    """The fleet's workers whose processes hold the lease of one of `run_ids` (a lease's
    owner is `host:pid:...`, the pid of the process executing the run)."""
    owners = Run.objects.filter(pk__in=run_ids, status="running").values_list(
        "lease_owner", flat=True
    )
    pids = {int(owner.split(":")[1]) for owner in owners if owner.count(":") >= 2}
    found = []
    for worker in fleet.alive:
        with contextlib.suppress(ProcessLookupError):
            if any(os.getpgid(pid) == worker.pid for pid in pids if psutil.pid_exists(pid)):
                found.append(worker)
    return found


def pinged(worker: Worker) -> bool:
    """Whether `worker` answers a broadcast ping under its node name (it consumes)."""
    name = worker.name.replace("%h", "")
    return any(node.startswith(name) for reply in app.control.ping(timeout=0.5) for node in reply)


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def lease_expired(run: Run) -> bool:
    expires = Run.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)
    return expires is not None and expires < timezone.now()


def posts_by_run(orders: LocalServer) -> Counter[int]:
    return Counter(int(r.headers["idempotency-key"].split(":")[0]) for r in orders.requests)


def recorded_result(run: Run, call_id: str) -> str | None:
    """The result of `call_id` in the run's checkpoint: among the messages, or among the
    results of the pending calls."""
    state = run.state or {}
    tool_messages = [m for m in state.get("messages", []) if m["role"] == "tool"]
    tool_messages += state.get("results", {}).values()
    return next((m["content"] for m in tool_messages if m["call_id"] == call_id), None)


def chat_requests(provider: TurnTakingProviderServer) -> list:
    return provider.requests_to("/v1/chat/completions")


def resume_after_lease(run: Run) -> Run:
    """What the beat-driven sweeper does once the dead worker's lease has run out."""
    wait_until(lambda: lease_expired(run), LEASE_S + 3, "the dead worker's lease to expire")
    assert sweep_stale_runs() >= 1
    wait_until(lambda: Run.objects.get(pk=run.pk).is_terminal, 15, "another worker to finish")
    return Run.objects.get(pk=run.pk)


def test_a_run_killed_between_steps_is_finished_by_another_worker_and_writes_once(
    trio, trusted_agent, provider_server, orders, fleet
):
    provider_server.text_delay_s = 1.5  # the second model call is in progress at the kill
    first = fleet.start()
    run = run_start(tenant=trio.acme, agent=trusted_agent, input="Order a widget.")
    wait_until(
        lambda: (
            RunEvent.objects.filter(run=run, type="tool.completed").exists()
            and len(chat_requests(provider_server)) == 2
        ),
        15,
        "the tool result and the second model call",
    )
    fleet.kill(first)

    run.refresh_from_db()
    assert run.status == "running" and run.lease_owner  # the dead worker still holds it
    assert recorded_result(run, "call_1") == '{"order": "created"}'  # checkpointed
    assert posts_by_run(orders) == {run.pk: 1}

    fleet.start()
    run = resume_after_lease(run)
    assert run.status == "succeeded", run.error
    assert run.output == "Done." and run.attempts == 2 and run.lease_owner == ""
    assert posts_by_run(orders) == {run.pk: 1}  # the recorded result was reused
    assert orders.requests[0].headers["idempotency-key"] == f"{run.pk}:call_1"
    assert len(chat_requests(provider_server)) == 3  # call, interrupted text, resumed text
    resumed = chat_requests(provider_server)[-1].body["messages"]
    assert resumed[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"order": "created"}',
    }
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types.count("tool.started") == types.count("tool.completed") == 1
    assert types.count("run.started") == 1 and types[-1] == "run.completed"
    assert provider_server.errors == []

    fleet.stop_all()
    assert fleet.leftovers() == []


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_worker_stopped_warm_hands_its_runs_over_at_once(
    trio, trusted_agent, provider_server, orders, fleet, pool
):
    """SIGTERM with a run waiting for its model: the worker lets it run RUN_DRAIN_S (1 s
    here), then releases its lease (claimable now, not once it expires) and asks for it
    again; the next worker resumes it without repeating the recorded call."""
    provider_server.text_delay_s = 5  # the second model call outlasts the drain
    first = fleet.start(pool=pool)
    run = run_start(tenant=trio.acme, agent=trusted_agent, input="Order a widget.")
    wait_until(lambda: len(chat_requests(provider_server)) == 2, 15, "the second model call")
    held_by = Run.objects.get(pk=run.pk).lease_owner
    provider_server.text_delay_s = 0
    fleet.stop(first)
    run.refresh_from_db()
    # Released by the worker as it stopped: free now (or already taken by the session's
    # worker, which consumes the queue the hand-over asks on), not held until it expires.
    assert held_by and run.lease_owner != held_by
    fleet.start(pool=pool)
    sweep_stale_runs()  # (this test's workers take the sweeper's queue)
    wait_until(lambda: Run.objects.get(pk=run.pk).is_terminal, 30, "the run to finish")
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 2
    assert posts_by_run(orders) == {run.pk: 1}  # the recorded call was not made again


def test_a_write_interrupted_in_flight_is_not_sent_again_and_the_model_is_told(
    trio, trusted_agent, provider_server, orders, fleet
):
    orders.route("POST", "/orders", Reply(status=201, json=ORDER_CREATED, delay_s=3))
    first = fleet.start()
    run = run_start(tenant=trio.acme, agent=trusted_agent, input="Order a widget.")
    wait_until(lambda: len(orders.requests) == 1, 15, "the POST to reach the server")
    fleet.kill(first)  # the order may well exist; nothing recorded the outcome

    fleet.start()
    run = resume_after_lease(run)
    assert run.status == "succeeded", run.error
    assert posts_by_run(orders) == {run.pk: 1}
    told = chat_requests(provider_server)[-1].body["messages"][-1]
    assert told["role"] == "tool" and UNKNOWN_OUTCOME in told["content"]
    completed = RunEvent.objects.get(run=run, type="tool.completed").payload
    assert UNKNOWN_OUTCOME in completed["error"] and completed["result"] is None

    fleet.stop_all()
    assert fleet.leftovers() == []


def test_a_run_whose_worker_died_before_claiming_it_is_not_left_queued(
    trio, trusted_agent, provider_server, orders, fleet, run_queue
):
    first = fleet.start()
    assert ping.apply_async(queue=run_queue).get(timeout=15) == "pong"  # it consumes
    pool = psutil.Process(first.pid).children()
    assert len(pool) == fleet.concurrency
    for child in pool:  # hold the window between taking the message and claiming the run
        child.send_signal(signal.SIGSTOP)
    run = run_start(tenant=trio.acme, agent=trusted_agent, input="Order a widget.")
    with app.connection_for_write() as broker:
        wait_until(
            lambda: run_ids_at_broker(broker, run_queue) == ([], [run.pk]),
            10,
            "the worker to take the run's message",
        )
    fleet.kill(first)
    run.refresh_from_db()
    assert (run.status, run.attempts) == ("queued", 0)

    fleet.start()
    deadline = time.monotonic() + 4 * LEASE_S  # the sweeper asks again after two leases
    while not Run.objects.get(pk=run.pk).is_terminal and time.monotonic() < deadline:
        sweep_stale_runs()
        time.sleep(0.5)
    run.refresh_from_db()
    assert run.status == "succeeded", f"still {run.status} after {4 * LEASE_S} s of sweeping"
    assert posts_by_run(orders) == {run.pk: 1}


def test_a_runs_worker_takes_runs_unacknowledged_and_one_it_died_holding_is_asked_again(
    trio, trusted_agent, provider_server, orders, settings
):
    """A solo worker of the runs queue, as `serve` starts them, takes its messages without
    acknowledgements (agentplatform.celery): the message of a run it took and died before
    claiming is gone from the broker, and the run, still queued, is asked for again by the
    sweeper after two leases. Its one slot is held by a run waiting for its model, so the
    second message waits in its hand."""
    settings.RUN_LEASE_S = LEASE_S
    prefix = f"durability-{uuid.uuid4().hex[:6]}"
    settings.RUNS_QUEUE = f"{prefix}-runs"  # the workers' own: their queues take the prefix
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    env.update(
        AP_TEST_QUEUE=prefix, RUN_LEASE_S=str(LEASE_S), RUN_DRAIN_S="1", RUN_CONCURRENCY="1",
        EGRESS_ALLOWLIST="127.0.0.1/32",
    )  # fmt: skip
    fleet = WorkerFleet(queue=settings.RUNS_QUEUE, env=env)
    try:
        provider_server.text_delay_s = 3  # the first run's answer keeps its slot taken
        first = fleet.start(pool="solo")
        holder = run_start(tenant=trio.acme, agent=trusted_agent, input="Order a widget.")
        wait_until(lambda: holding(fleet, [holder.pk]), 15, "the worker to claim the first run")
        waiting = run_start(tenant=trio.acme, agent=trusted_agent, input="Order a widget.")
        with app.connection_for_write() as broker:
            wait_until(
                lambda: run_ids_at_broker(broker, settings.RUNS_QUEUE) == ([], []),
                10,
                "the worker to take the second run's message, unacknowledged",
            )
        fleet.kill(first)
        waiting.refresh_from_db()
        assert (waiting.status, waiting.attempts) == ("queued", 0)

        fleet.start(pool="solo")
        provider_server.text_delay_s = 0
        deadline = time.monotonic() + 8 * LEASE_S  # the queued one: after two leases

        def statuses() -> dict[int, str]:
            runs = Run.objects.filter(pk__in=[holder.pk, waiting.pk])
            return dict(runs.values_list("pk", "status"))

        while set(statuses().values()) != {"succeeded"} and time.monotonic() < deadline:
            sweep_stale_runs()
            time.sleep(0.5)
        assert statuses() == {holder.pk: "succeeded", waiting.pk: "succeeded"}
        assert posts_by_run(orders) == {holder.pk: 1, waiting.pk: 1}
    finally:
        fleet.stop_all()
        with app.connection_for_write() as broker:
            forget_queue(broker, settings.RUNS_QUEUE)
    assert fleet.leftovers() == []


def test_a_runs_worker_neither_records_nor_acknowledges_the_messages_it_takes(
    trio, trusted_agent, provider_server, orders, settings
):
    """Nothing about a run's message reaches the broker after the worker took it: no entry
    among the unacknowledged messages and no acknowledgement removing one (Celery's own
    acknowledgement after each task; agentplatform.celery.admission_strategy). Kombu's Redis
    transport is the only one here that sends ZREM: its acknowledgement does. The worker
    admits them without Celery's tracer: no `task_prerun` signal (`record_tasks`) for them,
    where a ping sent to the same queue, which takes Celery's way, has one."""
    from agents.tasks import _broker

    prefix = f"durability-{uuid.uuid4().hex[:6]}"
    settings.RUNS_QUEUE = f"{prefix}-runs"  # the workers' own: their queues take the prefix
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    task_log = f"{prefix}-tasks"
    env.update(AP_TEST_QUEUE=prefix, EGRESS_ALLOWLIST="127.0.0.1/32", **{TASK_LOG_ENV: task_log})
    fleet = WorkerFleet(queue=settings.RUNS_QUEUE, env=env)
    broker = _broker()

    def acknowledgements() -> int:
        return broker.info("commandstats").get("cmdstat_zrem", {}).get("calls", 0)

    try:
        worker = fleet.start(pool="solo")
        wait_until(lambda: pinged(worker), 60, "the worker to consume")
        before = acknowledgements()
        runs = [run_start(tenant=trio.acme, agent=trusted_agent, input="Hi.") for _ in range(5)]
        wait_until(
            lambda: (
                Run.objects.filter(pk__in=[r.pk for r in runs], status="succeeded").count()
                == len(runs)
            ),
            30,
            "the runs to succeed",
        )
        assert acknowledgements() == before
        assert not broker.exists("unacked")
        ping.apply_async(queue=settings.RUNS_QUEUE)

        def traced() -> list[str]:
            return [json.loads(raw)["task"] for raw in broker.lrange(task_log, 0, -1)]

        wait_until(lambda: ping.name in traced(), 30, "the ping to be traced")
        assert execute_run_task.name not in traced()
    finally:
        broker.delete(task_log)
        fleet.stop_all()
        with app.connection_for_write() as connection:
            forget_queue(connection, settings.RUNS_QUEUE)
    assert fleet.leftovers() == []


def test_twenty_kills_lose_no_run_and_repeat_no_write(
    trio, trusted_agent, provider_server, orders, fleet, run_queue
):
    runs_wanted, kills_wanted, workers_wanted, bound_s = 20, 20, 3, 90
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    provider_server.tool_call_delay_s = 0.2
    provider_server.text_delay_s = 2.0  # so that kills land in model calls and in writes
    orders.route("POST", "/orders", Reply(status=201, json=ORDER_CREATED, delay_s=0.2))
    for worker in [fleet.start() for _ in range(workers_wanted)]:
        # Each consumes before the runs start: on a busy machine kills of workers still
        # starting would miss every run.
        wait_until(lambda w=worker: pinged(w), 60, f"worker {worker.name} to consume")
    ids = [
        run_start(tenant=trio.acme, agent=trusted_agent, input=f"Order widget {i}.").pk
        for i in range(runs_wanted)
    ]

    started = time.monotonic()
    next_kill, next_sweep = started + rng.uniform(0.5, 1.0), started
    while time.monotonic() - started < bound_s:
        now = time.monotonic()
        if fleet.killed < kills_wanted and now >= next_kill:
            fleet.kill(rng.choice(fleet.alive))
            fleet.start()
            next_kill = now + rng.uniform(0.5, 1.0)
        if now >= next_sweep:  # what beat does every 15 s, more often for a short test
            sweep_stale_runs()
            next_sweep = now + 0.5
        finished = not Run.objects.filter(pk__in=ids).exclude(status__in=TERMINAL).exists()
        if finished and fleet.killed == kills_wanted:
            break
        time.sleep(0.05)
    elapsed = time.monotonic() - started

    runs = list(Run.objects.filter(pk__in=ids).order_by("pk"))
    stuck = [(r.pk, r.status, r.attempts, r.lease_expires_at) for r in runs if not r.is_terminal]
    if stuck:
        with app.connection_for_write() as broker:
            at_broker = run_ids_at_broker(broker, run_queue)
        raise AssertionError(
            f"not finished after {elapsed:.0f} s (seed {seed}): {stuck}; "
            f"(waiting, taken) at the broker: {at_broker}"
        )
    assert elapsed < bound_s and fleet.killed == kills_wanted
    assert [r.status for r in runs] == ["succeeded"] * runs_wanted, [r.error for r in runs]

    # Never twice, and once whenever a result is known: the POST count per run is at most 1,
    # and exactly 1 where a result was recorded (in the state the model saw, or in a
    # tool.completed event: events are written before checkpoints, so a kill in between
    # leaves a result event and then an "outcome unknown" one; the call is not repeated).
    posts = posts_by_run(orders)
    assert set(posts) <= set(ids) and set(posts.values()) <= {1}, f"seed {seed}: {posts}"
    told_unknown = 0
    for run in runs:
        why = f"run {run.pk} (seed {seed})"
        told = [m["content"] for m in run.state["messages"] if m["role"] == "tool"]
        assert len(told) == 1, why
        if UNKNOWN_OUTCOME in told[0]:
            told_unknown += 1  # sent once or not at all, never repeated
        else:
            assert told[0] == '{"order": "created"}' and posts[run.pk] == 1, why
        completed = [e.payload for e in RunEvent.objects.filter(run=run, type="tool.completed")]
        results = [p for p in completed if p["error"] is None]
        assert len(results) <= 1, why
        if results:
            assert results[0]["result"] == ORDER_CREATED and posts[run.pk] == 1, why
        assert all(UNKNOWN_OUTCOME in p["error"] for p in completed if p["error"] is not None)
    resumed = sum(1 for run in runs if run.attempts > 1)
    print(
        f"\nchaos (seed {seed}): {runs_wanted} runs, {fleet.killed} kills, {fleet.started} "
        f"workers, {resumed} runs resumed, {told_unknown} told the outcome is unknown, "
        f"{sum(posts.values())} orders, {elapsed:.1f} s"
    )
    assert resumed > 0  # the kills did hit runs
    assert provider_server.errors == []

    fleet.stop_all()
    assert fleet.leftovers() == []
