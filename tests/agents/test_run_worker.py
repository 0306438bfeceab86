"""A worker process's runs on its event loop (agents/runs/worker.py), executed in this
process: what a lane holds once its runs are done."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from agents.runs import admit, run_start
from agents.runs import worker as run_worker
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def holds_a_connection() -> bool:
    return connection.connection is not None


def test_a_lane_gives_its_database_connection_back_once_it_has_no_run(trio, agent, provider_server):
    # (else each lane kept a PostgreSQL backend, about 4 MB, for the process's life, and the
    # pool could never shrink: bench/footprint.py)
    provider_server.script("openai", TextReply("Hi."))
    run = run_start(tenant=trio.acme, agent=agent, input="Hello?", enqueue=False)
    admit(run.pk, trio.acme.pk)
    held: list[bool] = [True]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_terminal:
            lanes = run_worker._lanes.executors
            held = [lane.submit(holds_a_connection).result() for lane in lanes]
            if not any(held):
                break
        time.sleep(0.05)
    assert run.status == "succeeded", run.error
    assert held == [False] * len(run_worker._lanes.executors)
