"""`--beat-thread` (agentplatform.celery.BeatThread): the run worker `manage.py serve` starts
first schedules the sweeper from a thread of its own process, not from a forked beat
process, and the sweeper it schedules resumes a run whose worker died.

A real worker process on a queue of its own; the run's agent answers from the offline demo
connection (no provider server needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agentplatform.celery import app
from agents.models import Run
from agents.runtime.spec import RunStatus
from agents.seed import seed_demo_agent
from providers.services import seed_demo_connection
from tenancy import services as tenancy
from tests import processes
from tests.agents.workers import forget_queue
from tests.conftest import ROOT, subprocess_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT_S = 60  # a loaded 2-core machine takes seconds to start a worker


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_worker_with_beat_in_a_thread_sweeps_a_dead_workers_run_and_forks_nothing(tmp_path):
    tenant = tenancy.tenant_create(slug=f"beat-{uuid.uuid4().hex[:6]}", name="Beat")
    seed_demo_connection(tenant)
    agent = seed_demo_agent(tenant)
    # What a worker that died mid-run leaves: running, under a lease that has run out.
    run = Run.objects.create(
        tenant=tenant, agent=agent, input="hello", correlation_id=uuid.uuid4().hex,
        status=RunStatus.RUNNING, lease_owner="a dead worker", attempts=1,
        lease_expires_at=timezone.now() - timedelta(minutes=1), started_at=timezone.now(),
    )  # fmt: skip
    queue = f"beat-thread-{uuid.uuid4().hex[:6]}"
    env = {**subprocess_env(), "AP_TEST_QUEUE": queue, "RUN_SWEEP_S": "1", "RUN_LEASE_S": "3"}
    log = tmp_path / "worker.log"
    with log.open("w") as stderr:
        worker = processes.spawn(
            [
                sys.executable, "-m", "celery", "-A", "agentplatform", "worker",
                "-n", f"beat-thread-{os.getpid()}@%h", "--pool", "solo",
                "-Q", f"{queue}-runs,{queue}-housekeeping", "--without-gossip",
                "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
                "--beat-thread", "--schedule", str(tmp_path / "celerybeat-schedule"),
            ],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while Run.objects.get(pk=run.pk).status != RunStatus.SUCCEEDED:
            assert worker.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert "beat: Starting" in log.read_text()
        assert children_of(worker.pid) == []  # beat is a thread, not a process
        run.refresh_from_db()
        assert run.attempts == 2 and run.output  # resumed by this worker, and answered
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        with app.connection_for_write() as broker:
            for name in ("runs", "housekeeping"):
                forget_queue(broker, f"{queue}-{name}")
