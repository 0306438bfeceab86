"""The Celery app. Settings come from Django's (CELERY_* names)."""

from __future__ import annotations

import logging
import os

import click
from celery import Celery, bootsteps, signals

from agentplatform.collector import freeze_what_was_loaded

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
# Celery's Django fixup runs Django's system checks when a worker starts. They import the
# URLconf and with it every view, DRF and drf-spectacular, which a worker never serves: 20 MB
# of PSS per worker process (bench/footprint.py). The checks run where a deployment starts,
# in `migrate` (serve's, compose's migrate service); `CELERY_SKIP_CHECKS=` (empty) runs them
# in the workers too.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

logger = logging.getLogger(__name__)

app = Celery("agentplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class BeatThread(bootsteps.StartStopStep):
    """`--beat-thread`: beat inside the worker as a thread. Celery's `--beat` forks it as a
    process of its own, which held 80 MB more (PSS, bench/footprint.py) to send a message
    every few seconds. Exactly one worker of a deployment takes either."""

    label = "Beat (thread)"

    def __init__(self, worker, beat_thread: bool = False, **options) -> None:
        self.enabled = bool(beat_thread)
        super().__init__(worker, **options)

    def create(self, worker):
        from celery.beat import EmbeddedService

        return EmbeddedService(
            worker.app,
            schedule_filename=worker.schedule_filename,
            scheduler_cls=worker.scheduler,
            thread=True,
        )


app.user_options["worker"].add(
    click.Option(["--beat-thread"], is_flag=True, default=False, help=BeatThread.__doc__)
)
app.steps["worker"].add(BeatThread)


@signals.worker_init.connect
def _log_in_as_the_app_and_check(**kwargs) -> None:
    """A worker process logs in as the app role, so the tenant policies bind its queries;
    then it exits (with the reason) before the pool starts if misconfigured: a login row-level
    security would not bind, other FIELD_ENCRYPTION_KEYS than the stored secrets'."""
    from agentplatform import startup_checks
    from tenancy import rls

    rls.assume_app_role()
    startup_checks.exit_unless_ready()


@signals.worker_init.connect
def _take_runs_as_the_record_needs(sender, **kwargs) -> None:
    """A solo worker of the runs queue takes its messages without acknowledgements, and
    logs no line per message. A message only asks for a queued run; the run's record is the
    request that lasts: a run whose message was lost (its worker died after taking it) stays
    queued and the sweeper asks for it again after two leases (agents.runs.sweeper), as it
    did for one lost after the acknowledgement, which came before the claim anyway. An
    acknowledged message costs two Redis transactions on the consuming thread (kombu records
    it as unacknowledged when it is taken; Celery's acknowledgement after the task removes
    it, which `admission_strategy` drops), and Celery's "received" and "succeeded" lines two
    log lines beside the run's own (bench/api.py prints the consumer threads' CPU per chat).
    A prefork pool keeps them: it hands messages on to its children, and without
    acknowledgements it would take them as fast as they come (no prefetch limit)."""
    from celery.concurrency import get_implementation
    from celery.concurrency.solo import TaskPool as SoloPool
    from django.conf import settings

    runs = sender.app.amqp.queues.consume_from.get(settings.RUNS_QUEUE)
    pool = get_implementation(sender.pool_cls)
    if runs is None or not (isinstance(pool, type) and issubclass(pool, SoloPool)):
        return
    runs.no_ack = True
    sender.app.tasks["agents.execute_run"].Strategy = "agentplatform.celery:admission_strategy"
    for name in ("celery.worker.strategy", "celery.app.trace"):  # (failures: ERROR, kept)
        logging.getLogger(name).setLevel(logging.WARNING)


def admission_strategy(task, app, consumer, **kwargs):
    """Celery's strategy for the run task, but a message from the runs queue is admitted by
    calling the task's function on the consuming thread, and never acknowledged (it was
    taken without one). Celery's request, tracer, signals, result handling and
    acknowledgement serve none of a run's messages (the Run is the record) and were most of
    that thread's CPU per chat (docs/operations.md). A message with an eta or an expiry
    (nothing sends one) takes Celery's way."""
    from celery.worker.strategy import default
    from django.conf import settings

    handle = default(task, app, consumer, **kwargs)
    runs_queue = settings.RUNS_QUEUE

    def handle_admission(message, body, ack, reject, callbacks, **options):
        if message.delivery_info.get("routing_key") != runs_queue:
            return handle(message, body, ack, reject, callbacks, **options)
        headers = message.headers
        if body is not None or headers.get("eta") or headers.get("expires"):
            return handle(message, body, _unacknowledged, _unacknowledged, callbacks, **options)
        args, kwargs, _ = message.decode()  # (protocol 2: args, kwargs, embed)
        try:
            task.run(*args, **kwargs)
        except Exception:  # the run stays queued: the sweeper asks for it again
            logger.exception("run message %s was not admitted", headers.get("id"))

    return handle_admission


def _unacknowledged(*args, **kwargs) -> None:
    """What acknowledging (or rejecting) a message taken without acknowledgement does."""


@signals.worker_ready.connect
def _freeze_what_was_loaded(**kwargs) -> None:
    """What a worker loaded to start lives as long as it: out of the collector's sight, as
    in the web process (agentplatform/asgi.py) and serve's preloaded children. A worker
    started by `celery worker` itself (compose's) kept it in sight: each full collection
    in a burst of runs scanned its 170,000 objects, a pause of 100-130 ms for every run in
    the process (bench/concurrency.py, 500 chats at once)."""
    freeze_what_was_loaded()


@signals.worker_process_init.connect
def _keep_the_connection_pool(**kwargs) -> None:
    """Celery's Django fixup closes a prefork process's whole connection pool before and
    after every task. Runs outlive their task here (agents.runs.worker executes them on the
    process's event loop after the task returned), and a pool closed under them fails their
    queries; so a task only gives its own connections back, as a request does."""
    from celery.fixups.django import DjangoFixup

    for fixup in app._fixups or ():
        if isinstance(fixup, DjangoFixup):
            signals.task_prerun.disconnect(fixup.worker_fixup.on_task_prerun)
            signals.task_postrun.disconnect(fixup.worker_fixup.on_task_postrun)
    signals.task_prerun.connect(_give_connections_back, weak=False)
    signals.task_postrun.connect(_give_connections_back, weak=False)


def _give_connections_back(**kwargs) -> None:
    from django.db import connections

    connections.close_all()


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _json_logs(logger, **kwargs) -> None:
    """A worker configures its own log handlers (plain text); LOG_FORMAT=json gives them the
    JSON formatter too, so a run's lines carry its correlation id there as well."""
    from django.conf import settings

    if getattr(settings, "LOG_FORMAT", "plain") == "json":
        from base.logs import use_json

        use_json(logger)
