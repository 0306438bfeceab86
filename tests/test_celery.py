from __future__ import annotations

import os
import sys

import pytest
from django.conf import settings

from agentplatform.celery import app
from agentplatform.collector import YOUNG_THRESHOLD
from agentplatform.tasks import ping
from tests import processes
from tests.conftest import ROOT


def test_a_real_worker_runs_the_ping_task_through_redis(celery_worker_process):
    result = ping.apply_async()
    assert result.get(timeout=10) == "pong"
    assert result.successful()
    assert settings.CELERY_BROKER_URL.startswith(("redis", "rediss"))


def test_crash_safety_settings_are_on():
    """What durable runs rely on (a killed worker's task is re-queued); the crash itself is
    exercised with durable runs."""
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1


def test_a_run_is_sent_as_the_message_celery_sends(settings):
    """agents.tasks.send_run pushes execute_run_task's message itself: the same envelope,
    headers and body as Celery's own (its ids and the result's reply queue aside), so any
    worker takes it as Celery's."""
    import base64
    import json
    import uuid

    from agents.tasks import _broker, execute_run_task, send_run

    queue = f"{settings.RUNS_QUEUE}-nobody-{uuid.uuid4().hex[:6]}"  # no worker consumes it
    broker = _broker()
    try:
        execute_run_task.apply_async((12, 34), queue=queue)
        send_run(12, 34, queue=queue)
        ours, celerys = (json.loads(m) for m in broker.lrange(queue, 0, -1))  # LPUSH: newest first
    finally:
        broker.delete(queue)
    for message in (ours, celerys):
        for field in ("id", "root_id"):
            assert message["headers"].pop(field) == message["properties"]["correlation_id"]
        for field in ("correlation_id", "delivery_tag"):
            uuid.UUID(message["properties"].pop(field))
    celerys["properties"].pop("reply_to")  # where results go: execute_run stores none
    assert base64.b64decode(ours.pop("body")) == base64.b64decode(celerys.pop("body"))
    assert ours == celerys
    assert ours["properties"]["delivery_info"] == {"exchange": "", "routing_key": queue}


def test_the_runs_queue_carries_run_admissions_only():
    """Its solo workers take it without acknowledgements (agentplatform.celery): a task that
    needs one goes elsewhere, whatever its route, unless routed there on purpose."""
    route = app.amqp.router.route
    assert route({}, "agents.execute_run")["queue"].name == settings.RUNS_QUEUE
    for task in ("agents.verify_outcome", "agentplatform.ping", "a.task.without.a.route"):
        assert route({}, task)["queue"].name == settings.HOUSEKEEPING_QUEUE


@pytest.mark.integration
def test_a_worker_hands_what_it_loaded_to_start_to_the_permanent_generation():
    """As the web process and serve's preloaded children do: a worker started by `celery
    worker` itself (compose's) freezes its start-up objects when it is ready, so a full
    collection in a burst of runs does not scan them, and collects young objects less often
    (agentplatform/collector.py)."""
    code = (
        "import gc, django; django.setup()\n"
        "from celery import signals\n"
        "import agentplatform.celery\n"
        "before = gc.get_freeze_count()\n"
        "gc.set_threshold(700, 10, 10)  # Python's (this child may inherit the suite's)\n"
        "signals.worker_ready.send(sender=None)\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()), gc.get_threshold()[0])\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentplatform.settings"}
    child = processes.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    before, after, in_sight, young = map(int, child.stdout.split())
    assert after > before  # (the warm process this test's child comes from froze its own)
    assert in_sight < 1_000, in_sight
    assert young == YOUNG_THRESHOLD


def test_in_a_run_of_both_tiers_a_fast_tests_messages_miss_the_sessions_worker(monkeypatch):
    """tests/conftest.py's redirect, once the session's worker consumes its queues: a run
    sent and a task Celery routes to one of those queues go to queues of the fast test's
    own; a queue a test names itself stays as named."""
    import json
    import uuid

    from agents.tasks import _broker, execute_run_task, send_run
    from tests.conftest import _sent_where_no_worker_listens

    consumed = (settings.RUNS_QUEUE, settings.BATCH_QUEUE, settings.HOUSEKEEPING_QUEUE)
    named = f"{settings.RUNS_QUEUE}-named-{uuid.uuid4().hex[:6]}"
    broker = _broker()
    before = [broker.llen(queue) for queue in consumed]  # (a worker may be taking them)
    _sent_where_no_worker_listens(monkeypatch)
    own = [f"{queue}-fast-tests" for queue in consumed]
    try:
        send_run(7, 8, queue=settings.RUNS_QUEUE)
        ping.apply_async()  # routed to the housekeeping queue
        execute_run_task.apply_async((9, 8), queue=named)
        after = [broker.llen(queue) for queue in consumed]
        assert all(a <= b for a, b in zip(after, before, strict=True))
        assert [broker.llen(queue) for queue in own] == [1, 0, 1]
        [message] = broker.lrange(named, 0, -1)
        assert json.loads(message)["headers"]["argsrepr"] == "(9, 8)"
    finally:
        broker.delete(named, *own)


def test_the_redirect_is_undone_on_the_sessions_settings_under_a_tests_own_override():
    """A fast test that undoes its patches (monkeypatch.undo) while its `settings` fixture
    still overrides a setting: the queues are back as they were once the override ends
    too. (Undone through django.conf.settings, they were set back in the override only,
    and the rest of the session sent its runs where no worker listens.)"""
    from django.test import override_settings

    from tests.conftest import _sent_where_no_worker_listens

    queues = (settings.RUNS_QUEUE, settings.BATCH_QUEUE, settings.HOUSEKEEPING_QUEUE)
    patches = pytest.MonkeyPatch()
    _sent_where_no_worker_listens(patches)
    override = override_settings(EGRESS_ALLOWLIST=["127.0.0.1/32"])  # as a fixture does
    override.enable()
    try:
        assert f"{queues[0]}-fast-tests" == settings.RUNS_QUEUE
        swept = settings.CELERY_TASK_ROUTES["agents.sweep_stale_runs"]["queue"]
        assert swept == settings.HOUSEKEEPING_QUEUE == f"{queues[2]}-fast-tests"
        patches.undo()
        assert queues[0] == settings.RUNS_QUEUE
    finally:
        patches.undo()  # (a no-op once done)
        override.disable()
    assert queues == (settings.RUNS_QUEUE, settings.BATCH_QUEUE, settings.HOUSEKEEPING_QUEUE)
    assert settings.CELERY_TASK_ROUTES["agents.sweep_stale_runs"]["queue"] == queues[2]
