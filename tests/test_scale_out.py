"""Scaled out by hand, as docs/operations.md "Scaling out" says: PostgreSQL and Redis outside the
platform (this session's embedded ones, reached only through DATABASE_URL / REDIS_URL), two
web processes (the production uvicorn command, lifespan on), two run workers with their own
node names and one beat, each a real process; a fake OpenAI-compatible provider on loopback.

`deployment` starts it all and takes it all down again, also when a test fails. What a test
may use: `deployment.webs` (base URLs and processes), `deployment.fleet` /
`deployment.workers` (kill one with `fleet.kill(worker)`, add one with `start_worker()`),
`deployment.beat`, and `deployment.executions()`: which worker ran which task.

The processes get what `manage.py serve` gives its children (`child_env`): explicit URLs
and keys, here through `subprocess_env` (the test settings, for this session's database)
plus a Celery queue of the deployment's own, so no other worker of the session takes its
runs, and a DATA_DIR that cannot exist (nothing may need it with external services).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import pytest
import redis
from django.conf import settings

from agentplatform.celery import app
from agents.models import Run, RunEvent
from tenancy import services as tenancy
from tests import processes
from tests.agents.workers import TASK_LOG_ENV, Worker, WorkerFleet, forget_queue
from tests.api.test_sse import Message, parse
from tests.conftest import ROOT, subprocess_env
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.live_server import AsgiServer, start_asgi_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
]  # the processes see the fixtures' rows

START_TIMEOUT_S = 60  # each; a loaded 2-core machine starts four processes at once
STREAM_TIMEOUT_S = 20


def worker_queues(queue: str) -> str:
    """What a run worker's `-Q` names: `runs,housekeeping`, as in production, under the
    deployment's own prefix (the test settings prefix the queues with AP_TEST_QUEUE)."""
    return f"{queue}-runs,{queue}-housekeeping"


@dataclass
class Deployment:
    queue: str
    env: dict[str, str]
    webs: list[AsgiServer] = field(default_factory=list)
    fleet: WorkerFleet | None = None
    workers: list[Worker] = field(default_factory=list)
    beat: subprocess.Popen | None = None

    @property
    def task_log(self) -> str:
        return f"{self.queue}:tasks"

    def start_worker(self, index: int) -> Worker:
        worker = self.fleet.start(name=f"scale-runs{index}-{os.getpid()}@%h")
        self.workers.append(worker)
        return worker

    def executions(self, task: str | None = None) -> list[dict]:
        """The tasks the workers began, oldest first: task, args, worker (node name),
        group (`Worker.pid`)."""
        client = redis.Redis.from_url(settings.REDIS_URL)
        try:
            entries = [json.loads(raw) for raw in client.lrange(self.task_log, 0, -1)]
        finally:
            client.close()
        return [e for e in entries if task is None or e["task"] == task]

    def stop(self) -> None:
        """Everything down, whatever state a test left it in; what is left in the broker
        and the task log goes too."""
        for web in self.webs:
            with contextlib.suppress(Exception):
                web.stop()
        if self.beat is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.beat.pid, signal.SIGKILL)
            self.beat.wait(10)
        if self.fleet is not None:
            self.fleet.stop_all()
            assert self.fleet.leftovers() == []
        with app.connection_for_write() as broker:
            for name in ("runs", "batch", "housekeeping"):
                forget_queue(broker, f"{self.queue}-{name}")
            broker.default_channel.client.delete(self.task_log)


def start_beat(env: dict[str, str], log: Path) -> subprocess.Popen:
    """`celery beat` (exactly one), logging to `log`; `wait_beat` waits until it started."""
    with log.open("w") as stderr:
        return processes.spawn(
            [
                sys.executable, "-m", "celery", "-A", "agentplatform", "beat",
                "--loglevel", "INFO", "--schedule", str(log.parent / "celerybeat-schedule"),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # killpg takes it down whole
        )  # fmt: skip


def wait_beat(beat: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while "beat: Starting" not in log.read_text():
        if beat.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"celery beat did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


def wait_consuming(worker: Worker) -> None:
    """Until `worker` answers a ping under its node name (then it consumes its queues)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    name = worker.name.replace("%h", "")
    while True:
        replies = app.control.ping(timeout=0.5)
        if any(node.startswith(name) for reply in replies for node in reply):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker {worker.name} did not start")


@pytest.fixture
def deployment(tmp_path, settings) -> Iterator[Deployment]:
    """Starts the processes side by side (each costs seconds of CPU to import Django and
    the SDKs); whatever started is stopped at the end, also when another failed to."""
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-scale-{uuid.uuid4().hex[:6]}"
    (tmp_path / "a-file").write_text("")
    data_dir = tmp_path / "a-file" / "data"  # cannot exist: external services need none
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    env.update(AP_TEST_QUEUE=queue, DATA_DIR=str(data_dir), EGRESS_ALLOWLIST="127.0.0.1/32")
    deployment = Deployment(queue=queue, env=env)
    beat_log = tmp_path / "beat.log"
    try:
        deployment.beat = start_beat(env, beat_log)
        with ThreadPoolExecutor(max_workers=3) as pool:
            fleet_env = {**env, TASK_LOG_ENV: deployment.task_log}
            fleet = pool.submit(WorkerFleet, queue=worker_queues(queue), env=fleet_env)
            webs = [
                pool.submit(start_asgi_server, env, timeout_s=START_TIMEOUT_S) for _ in range(2)
            ]
        deployment.webs = [web.result() for web in webs if web.exception() is None]
        deployment.fleet = fleet.result() if fleet.exception() is None else None
        for started in (fleet, *webs):
            started.result()  # the first failure, if any
        for index in (1, 2):
            deployment.start_worker(index)
        wait_beat(deployment.beat, beat_log)
        for worker in deployment.workers:
            wait_consuming(worker)
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def key(trio) -> str:
    _, full = tenancy.api_key_create(tenant=trio.acme, name="scale", scopes=["read", "run"])
    return full


def read_events(response: httpx2.Response, *, stop_after: int | None = None) -> list[Message]:
    """The SSE messages with an event of `response` (until the stream ends, or `stop_after`
    of them; the caller then closes the connection). A stream still open after
    STREAM_TIMEOUT_S fails the test at its next message (heartbeats come every 15 s)."""
    deadline = time.monotonic() + STREAM_TIMEOUT_S
    got: list[Message] = []
    buffer = ""
    for text in response.iter_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"the stream was still open after {STREAM_TIMEOUT_S} s: {got}")
        buffer += text
        while "\n\n" in buffer:
            raw, buffer = buffer.split("\n\n", 1)
            message = parse(raw)
            if message.event is not None:
                got.append(message)
                if len(got) == stop_after:
                    return got
    return got


def stored(run_id: int) -> list[tuple[int, str, dict]]:
    events = RunEvent.objects.filter(run_id=run_id).order_by("seq")
    return [(e.seq, e.type, e.payload) for e in events]


def test_a_run_started_on_one_web_process_streams_from_the_other_and_resumes_across_both(
    trio, agent, key, provider_server, deployment
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')], delay_s=1.0),
        TextReply("It is 42.", delay_s=1.0),
    )
    web_a, web_b = (web.base for web in deployment.webs)
    auth = {"Authorization": f"Bearer {key}"}
    sse = {**auth, "Accept": "text/event-stream"}
    with httpx2.Client(timeout=STREAM_TIMEOUT_S) as client:
        with client.stream(
            "POST",
            f"{web_a}/api/v1/runs",
            json={"agent": "assistant", "input": "6*7?", "stream": True},
            headers=auth,
        ) as started:
            assert started.status_code == 201
            run_id = int(started.headers["X-Run-Id"])
            first = read_events(started, stop_after=2)  # then web A's stream goes away
        url_b = f"{web_b}/api/v1/runs/{run_id}/events"
        with client.stream(
            "GET", url_b, headers={**sse, "Last-Event-ID": str(first[-1].id)}
        ) as following:
            assert following.status_code == 200
            second = read_events(following, stop_after=2)  # live from web B
        url_a = f"{web_a}/api/v1/runs/{run_id}/events"
        with client.stream(
            "GET", url_a, headers={**sse, "Last-Event-ID": str(second[-1].id)}
        ) as rest:
            third = read_events(rest)  # back on web A, to the end

    joined = [(m.id, m.event, m.data) for m in first + second + third]
    assert joined == stored(run_id)  # every event once, in order, across both servers
    assert third[-1].event == "run.completed" and third[-1].data["output"] == "It is 42."

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.output, run.attempts) == ("succeeded", "It is 42.", 1)
    ran = [e for e in deployment.executions("agents.execute_run") if e["args"][0] == run_id]
    assert len(ran) == 1  # one worker took it, and only once
    assert ran[0]["group"] in {worker.pid for worker in deployment.workers}
    assert ran[0]["worker"].split("@")[0] in {w.name.split("@")[0] for w in deployment.workers}
    assert deployment.beat.poll() is None
