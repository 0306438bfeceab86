"""Real Celery workers a test can kill -9, and a model that answers by whose turn it is.

`WorkerFleet` runs `celery worker` (prefork) processes on the test database. Each worker is
forked from a warm fork server (this module run as `python -m tests.agents.workers`) that
has set up Django and the Celery app once, then runs exactly what `celery -A agentplatform
worker ...` runs (`app.worker_main(argv)`). A cold start costs about 3 s of CPU (Django
and the provider SDKs), so twenty restarts on a 2-core machine would starve the workers
under test; a fork is ready in a fraction of a second. Each worker leads its own session,
so `kill` takes the main process and its pool children down together, as a lost machine
would.

`TurnTakingProviderServer` answers each chat request from the request itself (a tool call
to a user message, a text after a tool result), so any number of runs can share it
concurrently and a resumed run gets the same answer again.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.fakes.provider_server import (
    ProviderServer,
    Reply,
    TextReply,
    ToolCall,
    ToolCallReply,
    _Handler,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Worker:
    pid: int  # also its process group: the worker leads its own session
    name: str


class WorkerFleet:
    """`celery worker` processes consuming `queue`; `stop_all` kills every one of them."""

    def __init__(self, *, queue: str, env: dict[str, str], concurrency: int = 2) -> None:
        self.queue, self.concurrency = queue, concurrency
        self.alive: list[Worker] = []
        self.started = 0
        self.killed = 0
        self._server = subprocess.Popen(
            [sys.executable, "-m", "tests.agents.workers"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._groups: set[int] = {self._server.pid}  # every process group created here
        if self._server.stdout.readline().strip() != "ready":
            self.stop_all()
            raise RuntimeError("the worker fork server did not start; see its stderr")

    def start(self, name: str | None = None, *, pool: str = "prefork") -> Worker:
        """A new worker; `name` is its node name (`-n`), distinct per worker; `pool`: prefork
        (`concurrency` processes) or solo (`manage.py serve`'s runs workers)."""
        self.started += 1
        name = name or f"durability{self.started}-{os.getpid()}@%h"
        processes = ["--concurrency", str(self.concurrency)] if pool == "prefork" else []
        argv = [
            "worker", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--pool", pool, *processes,
            "-n", name, "-Q", self.queue, "--loglevel", "WARNING",
        ]  # fmt: skip
        self._server.stdin.write(json.dumps(argv) + "\n")
        self._server.stdin.flush()
        pid = self._server.stdout.readline().strip()
        if not pid.isdigit():
            raise RuntimeError("the worker fork server died; see its stderr")
        worker = Worker(pid=int(pid), name=name)
        self._groups.add(worker.pid)
        self.alive.append(worker)
        return worker

    def kill(self, worker: Worker) -> None:
        """SIGKILL the worker and its pool children at once (no cleanup code runs), and
        wait until they are gone."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        self.alive.remove(worker)
        self.killed += 1
        if survivors := self._running({worker.pid}, wait_s=10):
            seen = [(p.pid, p.info["status"]) for p in survivors]  # (what they were doing)
            raise RuntimeError(f"worker {worker.name} survived SIGKILL: {seen}")

    def stop(self, worker: Worker, timeout_s: float = 30) -> None:
        """SIGTERM (Celery's warm shutdown), and wait until the worker has exited."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGTERM)
        self.alive.remove(worker)
        if self._running({worker.pid}, wait_s=timeout_s):
            raise RuntimeError(f"worker {worker.name} did not stop within {timeout_s} s")

    def stop_all(self) -> None:
        for worker in list(self.alive):
            self.kill(worker)
        for group in self._groups:  # the fork server, and anything a worker left behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._server.wait(10)
        self._server.stdin.close()
        self._server.stdout.close()

    def leftovers(self, wait_s: float = 5.0) -> list[psutil.Process]:
        """Processes of this fleet still running (zombies awaiting a reaper do not count)."""
        return self._running(self._groups, wait_s=wait_s)

    @staticmethod
    def _running(groups: set[int], *, wait_s: float) -> list[psutil.Process]:
        deadline = time.monotonic() + wait_s
        while True:
            running = []
            for process in psutil.process_iter(["status"]):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    in_group = os.getpgid(process.pid) in groups
                    if in_group and process.info["status"] != psutil.STATUS_ZOMBIE:
                        running.append(process)
            if not running or time.monotonic() > deadline:
                return running
            time.sleep(0.02)


TASK_LOG_ENV = "AP_TEST_TASK_LOG"


def record_tasks(key: str) -> None:
    """Before each task a worker runs, push `{"task", "args", "worker" (its node name),
    "group" (the worker's process group: `Worker.pid`)}` as JSON onto the Redis list `key`:
    which worker took which run. One RPUSH per task."""
    import redis
    from celery import signals
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)  # redis-py reconnects after a fork

    def record(task_id=None, task=None, args=None, **kwargs) -> None:
        entry = {
            "task": task.name,
            "args": list(args or ()),
            "worker": task.request.hostname,
            "group": os.getpgid(0),
        }
        client.rpush(key, json.dumps(entry))

    signals.task_prerun.connect(record, weak=False)


def serve_forks() -> None:
    """The fork server: Django and the Celery app set up once; then, for each JSON argv
    line on stdin, fork a worker running it and answer with the worker's pid. With
    AP_TEST_TASK_LOG set, the workers record the tasks they run there (`record_tasks`)."""
    import warnings

    import django

    django.setup()
    from celery.exceptions import SecurityWarning

    from agentplatform.celery import app

    warnings.simplefilter("ignore", SecurityWarning)  # tests run as root in containers
    app.loader.import_default_modules()
    if os.environ.get(TASK_LOG_ENV):
        record_tasks(os.environ[TASK_LOG_ENV])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps killed workers
    print("ready", flush=True)
    while line := sys.stdin.readline():
        argv = json.loads(line)
        session_made, made = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(session_made)
                os.setsid()
                os.close(made)  # its own process group now: the parent may answer
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the pool reaps its children
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)  # the banner; warnings and errors still go to stderr
                code = app.worker_main(argv) or 0
            finally:
                os._exit(code)
        # Answer once the worker leads its own group: a pid given before that could be
        # killed by group (`killpg`) while the group does not exist yet, and the worker,
        # making it a moment later, would outlive its kill unseen.
        os.close(made)
        os.read(session_made, 1)  # EOF: the child closed its end (or died)
        os.close(session_made)
        print(pid, flush=True)


class _TurnHandler(_Handler):
    """Chooses the reply from the request body instead of a shared queue."""

    _request_body: Any = None

    def _openai_chat(self, body: Any) -> None:
        self._request_body = body
        super()._openai_chat(body)

    def _take_reply(self, api: str) -> Reply | None:
        owner: TurnTakingProviderServer = self.server.owner  # type: ignore[assignment]
        reply = owner.reply_for(self._request_body)
        if not owner._wait(reply.delay_s):
            self.close_connection = True
            raise ConnectionAbortedError("server closed")
        return reply


class TurnTakingProviderServer(ProviderServer):
    """OpenAI chat: a user message gets a call to `tool_name`; anything else gets a text.

    The call's id is fixed, so a run that repeats its first model call after a crash
    names the same call again.
    """

    CALL_ID = "call_1"

    def __init__(
        self,
        *,
        tool_name: str,
        arguments: dict[str, Any],
        text: str = "Done.",
        tool_call_delay_s: float = 0.0,
        text_delay_s: float = 0.0,
    ) -> None:
        super().__init__()
        self._httpd.RequestHandlerClass = _TurnHandler  # before any request arrives
        self.tool_name, self.arguments, self.text = tool_name, arguments, text
        self.tool_call_delay_s, self.text_delay_s = tool_call_delay_s, text_delay_s

    def reply_for(self, body: Any) -> Reply:
        messages = body.get("messages") or [{}]
        if messages[-1].get("role") == "user":
            call = ToolCall(self.CALL_ID, self.tool_name, json.dumps(self.arguments))
            return ToolCallReply([call], delay_s=self.tool_call_delay_s)
        return TextReply(self.text, delay_s=self.text_delay_s)


def run_ids_at_broker(connection: Any, queue: str) -> tuple[list[int], list[int]]:
    """Runs whose `agents.execute_run` message waits in `queue`, and runs whose message was
    taken from it by a worker and not acknowledged yet (or ever: the worker was killed).
    `connection` is a kombu Connection to the broker."""
    client = connection.default_channel.client

    def run_id(message: Any) -> int | None:
        headers = message.get("headers") or {}
        if headers.get("task") != "agents.execute_run":
            return None
        return int(ast.literal_eval(headers["argsrepr"])[0])

    waiting = [run_id(json.loads(raw)) for raw in client.lrange(queue, 0, -1)]
    taken = []
    for raw in client.hvals("unacked"):
        message, _exchange, routing_key = json.loads(raw)
        if routing_key == queue:
            taken.append(run_id(message))
    return [i for i in waiting if i is not None], [i for i in taken if i is not None]


def forget_queue(connection: Any, queue: str) -> None:
    """Drop `queue`, its bindings, and the unacknowledged messages killed workers took from
    it (kombu's Redis transport would otherwise restore them to it after its visibility
    timeout, long after the test). `connection` is a kombu Connection to the broker."""
    client = connection.default_channel.client
    for tag, raw in client.hgetall("unacked").items():
        with contextlib.suppress(ValueError, TypeError, IndexError):
            if json.loads(raw)[2] == queue:  # [message, exchange, routing_key]
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
    priorities = [f"{queue}\x06\x16{step}" for step in (3, 6, 9)]
    bindings = [f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"]
    client.delete(queue, *priorities, *bindings)


if __name__ == "__main__":
    serve_forks()
