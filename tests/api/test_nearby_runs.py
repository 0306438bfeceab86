"""Runs a web process executes itself (agents.runs.worker.Nearby): a `/v1` chat runs
on the server that follows it, not through a worker's queue; with RUN_NEARBY_CONCURRENCY=0
a worker runs it; a server that stops hands its runs over, and a worker finishes them.

Who executes a run is read from its lease while it waits for a slow model (the lease owner
is `host:pid:token`; finalize clears it)."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from agents.models import Run
from agents.runtime.spec import RunStatus
from tenancy import services as tenancy
from tests import live_server
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(trio) -> str:
    return tenancy.api_key_create(tenant=trio.acme, name="chat", scopes=["run"])[1]


def chat_in_background(base: str, key: str, results: list) -> threading.Thread:
    def chat() -> None:
        client = openai.OpenAI(api_key=key, base_url=f"{base}/v1", max_retries=0, timeout=30)
        try:
            completion = client.chat.completions.create(
                model="assistant", messages=[{"role": "user", "content": "Hello?"}]
            )
            results.append(completion.choices[0].message.content)
        except openai.APIError as exc:  # the server stopped under it
            results.append(exc)

    thread = threading.Thread(target=chat, daemon=True)
    thread.start()
    return thread


def executor_pid(timeout_s: float = 20) -> int:
    """The process holding the lease of the (one) running run."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = Run.objects.filter(status=RunStatus.RUNNING).exclude(lease_owner="").first()
        if run is not None:
            return int(run.lease_owner.split(":")[1])
        time.sleep(0.05)
    raise AssertionError("no run was claimed")


def finished_run(timeout_s: float = 30) -> Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = Run.objects.order_by("-pk").first()
        if run is not None and run.is_terminal:
            return run
        time.sleep(0.1)
    raise AssertionError("the run did not finish")


def test_a_chat_runs_in_the_web_process_that_follows_it(
    trio, agent, key, provider_server, celery_worker_process
):
    provider_server.script("openai", TextReply("Hi there.", delay_s=1.0))
    server = live_server.start_asgi_server()
    try:
        results: list = []
        thread = chat_in_background(server.base, key, results)
        assert executor_pid() == server.process.pid
        thread.join(30)
        assert results == ["Hi there."]
        assert finished_run().status == RunStatus.SUCCEEDED
    finally:
        server.stop()


def test_without_nearby_slots_a_worker_runs_the_chat(
    trio, agent, key, provider_server, celery_worker_process
):
    provider_server.script("openai", TextReply("Hi there.", delay_s=1.0))
    server = live_server.start_asgi_server({"RUN_NEARBY_CONCURRENCY": "0"})
    try:
        results: list = []
        thread = chat_in_background(server.base, key, results)
        assert executor_pid() == celery_worker_process.pid
        thread.join(30)
        assert results == ["Hi there."]
    finally:
        server.stop()


def test_a_stopping_server_hands_its_runs_to_a_worker_which_finishes_them(
    trio, agent, key, provider_server, celery_worker_process
):
    # The first answer never comes in time: the server stops while the run waits for it.
    provider_server.script(
        "openai", TextReply("too late", delay_s=20.0), TextReply("Finished elsewhere.")
    )
    server = live_server.start_asgi_server()
    results: list = []
    chat_in_background(server.base, key, results)
    assert executor_pid() == server.process.pid
    started = time.monotonic()
    server.stop()  # SIGTERM: its open stream gets the graceful 5 s, then the run is handed over
    assert time.monotonic() - started < 12  # not the model's 20 s, nor a lease's expiry
    run = finished_run()
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == "Finished elsewhere."
    assert run.attempts == 2  # the server's claim, then the worker's
