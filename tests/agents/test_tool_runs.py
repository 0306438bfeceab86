"""Direct tool calls recorded as runs; approval-gated ones park and finish after a decision."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.http import Http404
from django.utils import timezone

from agents.models import Approval, Run, RunEvent
from agents.runs import approval_decide, direct_calls, run_cancel
from agents.runs import writer as run_writer
from agents.runs.direct_calls import atool_run
from agents.runs.engine import execute_run
from tenancy import services as tenancy
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(trio):
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="mcp", scopes=["read", "run"])
    return key


def call(tenant, name, arguments, **who):
    async def once():
        try:
            return await atool_run(tenant=tenant, name=name, arguments=arguments, **who)
        finally:
            await run_writer.aclose()

    return async_to_sync(once)()


def event_types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def finish(run: Run) -> Run:
    """Execute the decided run here; a Celery worker of this session may take it first."""
    execute_run(run.pk)
    deadline = time.monotonic() + 10
    while not (run := Run.objects.get(pk=run.pk)).is_terminal and time.monotonic() < deadline:
        time.sleep(0.02)
    return run


def gated_calculator(tenant, **fields) -> None:
    ToolDefinition.objects.create(
        tenant=tenant, name="gated_calc", kind="builtin", config={"builtin": "calculator"},
        requires_approval=True, **fields,
    )  # fmt: skip


def test_a_call_is_executed_and_recorded(trio, key):
    outcome = call(trio.acme, "calculator", {"expression": "6*7"}, api_key=key, via="mcp")
    assert (outcome.status, outcome.result, outcome.error) == ("succeeded", {"result": 42}, None)
    run = Run.objects.get(pk=outcome.run_id)
    assert (run.tenant_id, run.tool_name, run.agent_id, run.status) == (
        trio.acme.pk, "calculator", None, "succeeded"
    )  # fmt: skip
    assert run.initiated_by_api_key_id == key.pk
    assert (run.input, run.output) == ('{"expression": "6*7"}', '{"result": 42}')
    assert event_types(run) == ["tool.started", "tool.completed"]
    assert RunEvent.objects.get(run=run, seq=1).payload["via"] == "mcp"


def test_a_recorded_call_has_the_models_defaults_elsewhere(trio, key):
    """The record is written by hand-built SQL: every column it does not set must hold what
    the ORM would have stored."""
    outcome = call(trio.acme, "calculator", {"expression": "1"}, api_key=key)
    run = Run.objects.get(pk=outcome.run_id)
    default = Run()
    written = {"id", "tenant_id", "tool_name", "input", "status", "output", "error",
               "correlation_id", "started_at", "finished_at", "last_seq",
               "initiated_by_api_key_id", "created_at"}  # fmt: skip
    for field in Run._meta.concrete_fields:
        if field.attname not in written:
            assert getattr(run, field.attname) == getattr(default, field.attname), field.name
    assert run.started_at <= run.finished_at == run.created_at and run.last_seq == 2
    assert run.initiated_by_user_id is None


def test_bad_arguments_fail_the_run_with_the_reason(trio, key):
    outcome = call(trio.acme, "calculator", {"nope": 1}, api_key=key)
    assert outcome.status == "failed" and "expression" in outcome.error
    run = Run.objects.get(pk=outcome.run_id)
    assert run.status == "failed" and run.error == outcome.error
    assert run.output == ""  # no result: empty, not the JSON of an empty text


def test_an_unknown_or_other_tenants_tool_is_a_404(trio, key):
    ToolDefinition.objects.create(
        tenant=trio.globex, name="globex_calc", kind="builtin", config={"builtin": "calculator"}
    )
    with pytest.raises(Http404):
        call(trio.acme, "globex_calc", {"expression": "1"}, api_key=key)
    with pytest.raises(Http404):
        call(trio.acme, "nope", {}, api_key=key)
    assert not Run.objects.filter(tenant=trio.acme).exists()


def test_an_approval_gated_call_parks_then_runs_once_with_the_edited_arguments(trio, key):
    gated_calculator(trio.acme)
    outcome = call(trio.acme, "gated_calc", {"expression": "1+1"}, api_key=key)
    assert outcome.status == "awaiting_approval" and outcome.result is None
    approval = Approval.objects.get(run_id=outcome.run_id)
    assert f"/api/v1/runs/{outcome.run_id}/approvals/{approval.pk}" in outcome.decide_at
    assert Run.objects.get(pk=outcome.run_id).status == "awaiting_approval"
    assert event_types(Run.objects.get(pk=outcome.run_id)) == ["approval.required"]

    approval_decide(
        tenant=trio.acme, approval=approval, approved=True, by=trio.alice,
        arguments={"expression": "6*7"},
    )  # fmt: skip
    run = finish(Run.objects.get(pk=outcome.run_id))
    assert (run.status, run.output) == ("succeeded", '{"result": 42}')
    assert event_types(run) == [
        "approval.required", "tool.started", "tool.completed", "run.completed"
    ]  # fmt: skip
    execute_run(run.pk)  # a second delivery does nothing
    assert len(event_types(run)) == 4


def test_a_parked_call_is_its_callers_numbered_from_one_and_cancelled_after_its_question(trio, key):
    """Who asked for a gated call stays on its run (their access to it and its attribution);
    its events count from 1, and a cancel's event follows the question's."""
    gated_calculator(trio.acme)
    by_key = call(trio.acme, "gated_calc", {"expression": "1+1"}, api_key=key)
    by_user = call(trio.acme, "gated_calc", {"expression": "1+1"}, user=trio.bob)
    runs = [Run.objects.get(pk=outcome.run_id) for outcome in (by_key, by_user)]
    assert [(r.initiated_by_api_key_id, r.initiated_by_user_id) for r in runs] == [
        (key.pk, None),
        (None, trio.bob.pk),
    ]
    assert [r.last_seq for r in runs] == [1, 1]

    cancelled = run_cancel(tenant=trio.acme, run=runs[1], by=trio.bob)
    assert cancelled.status == "cancelled"
    assert list(
        RunEvent.objects.filter(run=cancelled).order_by("seq").values_list("seq", "type")
    ) == [
        (1, "approval.required"),
        (2, "run.cancelled"),
    ]
    approved = Approval.objects.get(run=runs[0])
    approval_decide(tenant=trio.acme, approval=approved, approved=True, by=trio.alice)
    run = finish(runs[0])
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == [
        1, 2, 3, 4
    ]  # fmt: skip


def test_a_gated_call_counts_toward_the_rate_limit_when_approved_not_when_asked(trio, key):
    gated_calculator(trio.acme, rate_limit_per_minute=1)
    asked = [call(trio.acme, "gated_calc", {"expression": "6*7"}, api_key=key) for _ in range(2)]
    assert [outcome.status for outcome in asked] == ["awaiting_approval"] * 2
    runs = []
    for outcome in asked:  # asking counted nothing: the first approved runs
        approval = Approval.objects.get(run_id=outcome.run_id)
        approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
        runs.append(finish(Run.objects.get(pk=outcome.run_id)))
    assert runs[0].status == "succeeded"
    assert runs[1].status == "failed" and "limited to 1 calls per minute" in runs[1].error
    assert event_types(runs[1]) == [
        "approval.required", "tool.started", "tool.rate_limited", "tool.completed", "run.failed"
    ]  # fmt: skip


def test_a_rejected_call_fails_with_who_and_why(trio, key):
    gated_calculator(trio.acme)
    outcome = call(trio.acme, "gated_calc", {"expression": "1+1"}, api_key=key)
    approval = Approval.objects.get(run_id=outcome.run_id)
    approval_decide(
        tenant=trio.acme, approval=approval, approved=False, by=trio.alice, reason="not today"
    )
    run = finish(Run.objects.get(pk=outcome.run_id))
    assert (run.status, run.error) == ("failed", "rejected by alice: not today")
    assert "tool.started" not in event_types(run)


def test_concurrent_calls_are_recorded_together_and_each_waits_for_its_own(trio, key, monkeypatch):
    from agents.runs import direct_calls as tool_runs

    batches: list[int] = []
    real = run_writer._parameters

    def counted(records):  # the real statement's parameters, counted
        batches.append(len(records))
        return real(records)

    monkeypatch.setattr(run_writer, "_parameters", counted)

    async def many():
        calls = (
            tool_runs.atool_run(
                tenant=trio.acme, name="calculator", arguments={"expression": f"{n}+1"},
                api_key=key, via="mcp",
            )
            for n in range(20)
        )  # fmt: skip
        try:
            return await asyncio.gather(*calls)
        finally:
            await run_writer.aclose()

    outcomes = async_to_sync(many)()
    assert [o.result for o in outcomes] == [{"result": n + 1} for n in range(20)]
    assert sum(batches) == 20 and len(batches) < 20  # grouped, none lost
    runs = Run.objects.filter(pk__in=[o.run_id for o in outcomes])
    assert runs.count() == 20
    assert {r.output for r in runs} == {f'{{"result": {n + 1}}}' for n in range(20)}
    assert RunEvent.objects.filter(run__in=runs).count() == 40


def test_a_record_connection_closed_by_the_server_is_replaced_before_the_next_write(trio, key):
    """A restart or a terminated backend costs a reconnection, not a failed call."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def terminate_the_record_connection() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                [run_writer.APPLICATION_NAME],
            )
            return cursor.fetchone()[0]

    async def two_calls():
        try:
            first = await atool_run(
                tenant=trio.acme, name="calculator", arguments={"expression": "1"}, api_key=key
            )
            assert await sync_to_async(terminate_the_record_connection)() == 1
            await asyncio.sleep(0.2)  # the goodbye reaches the socket
            second = await atool_run(
                tenant=trio.acme, name="calculator", arguments={"expression": "2"}, api_key=key
            )
            return first, second
        finally:
            await run_writer.aclose()

    first, second = async_to_sync(two_calls)()
    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert Run.objects.filter(pk__in=[first.run_id, second.run_id]).count() == 2


def test_a_result_postgres_would_refuse_is_stored_as_text(trio, key):
    """NUL characters and NaN are not storable as they are (text, jsonb): the record keeps
    them readable instead of failing the call after the tool ran."""
    outcome = call(trio.acme, "think", {"thought": "a\x00b"}, api_key=key)
    assert outcome.status == "succeeded"
    run = Run.objects.get(pk=outcome.run_id)
    assert "\x00" not in run.input + run.output
    assert json.loads(run.output) == json.loads(run.input) == {"thought": "a\ufffdb"}
    assert RunEvent.objects.get(run=run, seq=2).payload["result"] == {"thought": "a\ufffdb"}
    assert run_writer.storable_json({"x": float("nan")}) == '{"x": "nan"}'


def call_record(trio, key, n: int, tool_name: str = "calculator") -> run_writer.CallRecord:
    now = timezone.now()
    return run_writer.CallRecord(
        tenant_id=trio.acme.pk, tool_name=tool_name, arguments={}, status="succeeded",
        output=str(n), error="", correlation_id=f"corr-{n}-{now.timestamp()}",
        started_at=now, finished_at=now, initiated_by_user_id=None,
        initiated_by_api_key_id=key.pk, events=[("tool.started", {"n": n})],
    )  # fmt: skip


def test_a_record_the_database_refuses_fails_alone_and_a_cancelled_caller_is_still_recorded(
    trio, key
):
    async def scenario():
        try:
            writes = [
                asyncio.ensure_future(run_writer.awrite_call(call_record(trio, key, n)))
                for n in range(4)
            ]
            refused = asyncio.ensure_future(
                run_writer.awrite_call(call_record(trio, key, 9, tool_name="a\x00b"))
            )
            await asyncio.sleep(0)  # each has queued its record
            writes[1].cancel()  # its caller went away: the record is written anyway
            results = await asyncio.gather(*writes, refused, return_exceptions=True)
            await asyncio.sleep(0.1)
            return results
        finally:
            await run_writer.aclose()

    results = async_to_sync(scenario)()
    assert isinstance(results[1], asyncio.CancelledError)
    assert isinstance(results[4], psycopg.DataError)  # the refused one alone
    assert all(isinstance(r, int) for i, r in enumerate(results[:4]) if i != 1)
    stored = Run.objects.filter(tenant=trio.acme, tool_name="calculator")
    assert sorted(stored.values_list("output", flat=True)) == ["0", "1", "2", "3"]


def test_a_call_whose_caller_leaves_still_finishes_and_is_recorded(trio, key, settings):
    """An MCP client disconnecting cancels its request; the tool it started still runs to
    its end and its run is recorded (no effect without its record)."""
    from tests.tools.local_server import LocalServer, Reply

    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]  # the local server stands in for the bank
    server = LocalServer()
    server.route("POST", "/pay", Reply(json={"paid": True}, delay_s=0.3))
    ToolDefinition.objects.create(
        tenant=trio.acme, name="pay", description="Pay.", kind="http",
        input_schema={"type": "object", "properties": {}},
        config={"method": "POST", "url": server.url + "/pay"},
    )  # fmt: skip
    recorded = sync_to_async(Run.objects.filter(tool_name="pay").exists)

    async def leave_midway():
        try:
            caller = asyncio.ensure_future(
                atool_run(tenant=trio.acme, name="pay", arguments={}, api_key=key)
            )
            await asyncio.sleep(0.1)  # the request is at the server
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            # The call goes on without its caller, to its record: wait for that, however
            # long a loaded machine makes it (a fixed 2.5 s of polling was not always enough).
            await asyncio.wait_for(asyncio.gather(*direct_calls._finishing), timeout=60)
            assert await recorded()
        finally:
            await run_writer.aclose()

    try:
        async_to_sync(leave_midway)()
    finally:
        server.close()
    run = Run.objects.get(tenant=trio.acme, tool_name="pay")
    assert (run.status, run.output) == ("succeeded", '{"paid": true}')
    assert len(server.requests) == 1


def test_the_record_writers_own_connection_closes_when_idle_and_never_under_a_write(trio, key):
    """The async record writer's connection is closed once unused for IDLE_S (it is not held
    against PostgreSQL's connection limit by an idle loop), kept while recent, and never
    closed under a statement in flight, however long that statement waits. Its idle check
    is called here as its timer would call it, with the last write dated back."""
    backends = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database() AND pid <> pg_backend_pid()"
    )

    async def scenario() -> tuple[list[int], str]:
        loop = asyncio.get_running_loop()
        watcher = await psycopg.AsyncConnection.connect(
            **run_writer._connection_params(), autocommit=True
        )
        counts = []

        async def count(settled_at: int | None = None) -> None:
            """The writer's backends; with `settled_at`, once they are that many (a closed
            connection's backend leaves pg_stat_activity a moment after the close)."""
            for _ in range(100):
                found = (
                    await (
                        await watcher.execute(backends, [run_writer.APPLICATION_NAME])
                    ).fetchone()
                )[0]
                if found == settled_at or settled_at is None:
                    break
                await asyncio.sleep(0.05)
            counts.append(found)

        try:
            await atool_run(tenant=trio.acme, name="calculator", arguments={"expression": "1"})
            group = run_writer._groups[loop]
            await count()  # 1: open after a write
            group.last_write = loop.time() - run_writer.IDLE_S / 2
            group._close_when_idle()
            await asyncio.sleep(0.05)
            await count()  # 1: written to recently, kept
            assert isinstance(group.idle_check, asyncio.TimerHandle)  # and checked again later
            group.last_write = loop.time() - run_writer.IDLE_S - 1
            group._close_when_idle()
            await asyncio.wait([group.writer])
            await count(settled_at=0)  # 0: idle, closed

            # A write waits on a lock (its statement in flight) when the idle check comes.
            async with runs_locked() as lock:
                waiting = calculate(trio.acme, key, "2")
                await waiting_at_the_lock(lock)
                # The connection opened again is checked for idleness again.
                assert isinstance(group.idle_check, asyncio.TimerHandle)
                group.last_write = loop.time() - run_writer.IDLE_S - 1
                group._close_when_idle()
                await asyncio.sleep(0.1)
                await count()  # 1: kept under the write
            outcome = await asyncio.wait_for(waiting, 10)
            return counts, outcome.status
        finally:
            await watcher.close()
            await run_writer.aclose()

    counts, status = async_to_sync(scenario)()
    assert counts == [1, 1, 0, 1]
    assert status == "succeeded"
    assert Run.objects.filter(tenant=trio.acme, tool_name="calculator").count() == 2


@asynccontextmanager
async def runs_locked() -> AsyncIterator[psycopg.AsyncConnection]:
    """Meanwhile no run record can be inserted: a record writer's statement waits at the
    server (the lock is taken by a connection of its own, given back at the end)."""
    params = {**run_writer._connection_params(), "application_name": "a test's lock"}
    lock = await psycopg.AsyncConnection.connect(**params)
    try:
        await lock.execute(f"LOCK TABLE {Run._meta.db_table} IN EXCLUSIVE MODE")
        yield lock
    finally:
        await lock.rollback()
        await lock.close()


async def waiting_at_the_lock(lock: psycopg.AsyncConnection) -> None:
    for _ in range(500):
        await lock.execute("SELECT pg_stat_clear_snapshot()")  # not the transaction's first view
        found = await lock.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock' AND datname = current_database()",
            [run_writer.APPLICATION_NAME],
        )
        if await found.fetchone():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no record statement waited at the lock")


def calculate(tenant, key, expression: str) -> asyncio.Future:
    return asyncio.ensure_future(
        atool_run(
            tenant=tenant, name="calculator", arguments={"expression": expression}, api_key=key
        )
    )


def test_a_call_waiting_for_its_record_is_told_when_the_record_writer_stops(trio, key):
    """The writer task cancelled (its loop ending) under a statement: the callers waiting for
    their records get an error instead of waiting for ever."""

    async def scenario() -> None:
        try:
            async with runs_locked() as lock:
                caller = calculate(trio.acme, key, "1")
                await waiting_at_the_lock(lock)
                run_writer._groups[asyncio.get_running_loop()].writer.cancel()
                with pytest.raises(RuntimeError, match="the record writer stopped"):
                    await asyncio.wait_for(caller, 5)
        finally:
            await run_writer.aclose()

    async_to_sync(scenario)()


def test_a_caller_gone_from_a_group_leaves_the_others_in_it_answered(trio, key):
    """Records that arrive under a statement go together in the next one; a caller of that
    group who stopped waiting is still recorded, and the callers after it still answered."""

    async def scenario() -> list:
        try:
            async with runs_locked() as lock:
                writes = [asyncio.ensure_future(run_writer.awrite_call(call_record(trio, key, 0)))]
                await waiting_at_the_lock(lock)
                for n in (1, 2):  # the next group: 1 and 2
                    writes.append(
                        asyncio.ensure_future(run_writer.awrite_call(call_record(trio, key, n)))
                    )
                await asyncio.sleep(0)
                writes[1].cancel()
            return await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 10)
        finally:
            await run_writer.aclose()

    results = async_to_sync(scenario)()
    assert isinstance(results[1], asyncio.CancelledError)
    assert isinstance(results[0], int) and isinstance(results[2], int)
    stored = Run.objects.filter(tenant=trio.acme, tool_name="calculator")
    assert sorted(stored.values_list("output", flat=True)) == ["0", "1", "2"]
