"""The Celery tasks of the agents app: the one module that knows Celery (the engine,
agents.runs.engine, and the services ask for execution through agents.signals)."""

from __future__ import annotations

import base64
import functools
import json
import uuid
from datetime import timedelta

import redis
from celery import current_app, shared_task, signals
from celery.utils.nodenames import anon_nodename
from django.conf import settings
from django.db.models.functions import Now
from django.dispatch import receiver

from agents.conversations import attachment_read, attachment_readings_stale
from agents.memory import facts_expired_purge
from agents.models import Attachment, Run
from agents.remote_health import check_remote_agents
from agents.runs import admit, drain, stale_runs
from agents.selftests import selftest_tools
from agents.signals import attachment_to_read, evaluation_due, run_queued, run_succeeded
from agents.verification import verify_with_tool
from tenancy import rls
from tenancy.models import Tenant


# No result stored: nobody reads it (the Run is the record), and storing it cost a tenth of
# a run's CPU in the worker (two Redis round trips per run).
@shared_task(
    name="agents.execute_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def execute_run_task(run_id: int, tenant_id: int | None = None) -> str:
    """Admit the run to this process's event loop (agents.runs.worker) and return: the run
    executes beside hundreds of others. Idempotent: a second delivery finds the run claimed
    or finished and does nothing."""
    return admit(run_id, tenant_id)


@receiver(run_queued, dispatch_uid="agents-run-queued")
def _send_to_a_worker(
    sender, run_id: int, tenant_id: int | None = None, batch: bool = False, **kwargs
) -> None:
    # The tenant rides along: the worker scopes the run without looking it up first. An
    # evaluation's run goes to the batch queue: batch workers take it, run workers never
    # see it, so interactive runs never queue behind an evaluation's hundred cases.
    send_run(run_id, tenant_id, queue=settings.BATCH_QUEUE if batch else settings.RUNS_QUEUE)


def send_run(run_id: int, tenant_id: int | None, *, queue: str) -> None:
    """Send `execute_run_task(run_id, tenant_id)` to `queue`: on a Redis broker, the message
    Celery would send, pushed onto the queue's list with one LPUSH. Celery's way there (its
    routing, signals and producer pool, kombu's envelope made anew) took 380 us of CPU per
    send against 64 us here (a loop of 3000), for a message that differs only in its ids;
    a busy web process sends one per /v1 chat. Another broker takes Celery's way."""
    broker = _broker()
    if broker is None:
        execute_run_task.apply_async((run_id, tenant_id), queue=queue)
    else:
        broker.lpush(queue, _run_message(run_id, tenant_id, queue))


@functools.cache
def _broker() -> redis.Redis | None:
    """The broker's Redis client (kombu's connection settings, key prefix included), or None
    when the broker is not Redis. Kept for the process: redis-py's pool is thread-safe and
    starts afresh in a forked child."""
    connection = current_app.connection_for_write()
    if connection.transport.driver_type != "redis":
        return None
    channel = connection.default_channel
    return channel.Client(connection_pool=channel.pool)


# The message of protocol 2 as kombu's Redis transport stores it: the body (args, kwargs,
# embed) base64-encoded inside a JSON envelope (tests/test_celery.py holds it to Celery's
# own).
_EMBED = '{}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}'


def _run_message(run_id: int, tenant_id: int | None, queue: str) -> str:
    task_id = str(uuid.uuid4())
    args = (run_id, tenant_id)
    body = f"[{json.dumps(args)}, {_EMBED}]".encode()
    headers = {
        "lang": "py", "task": execute_run_task.name, "id": task_id, "shadow": None,
        "eta": None, "expires": None, "group": None, "group_index": None, "retries": 0,
        "timelimit": [None, None], "root_id": task_id, "parent_id": None,
        "argsrepr": repr(args), "kwargsrepr": "{}", "origin": anon_nodename(),
        "ignore_result": True, "replaced_task_nesting": 0, "stamped_headers": None,
        "stamps": {},
    }  # fmt: skip
    properties = {
        "correlation_id": task_id, "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
        "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
    }  # fmt: skip
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": properties,
        }
    )


@shared_task(
    name="agents.advance_evaluation",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def advance_evaluation_task(evaluation_id: int, tenant_id: int) -> str:
    """One step of an evaluation (agents.evaluations.evaluation_advance: idempotent), then
    the next in EVALUATION_STEP_S while it runs."""
    from agents.evaluations import evaluation_advance
    from agents.models import Evaluation, EvaluationStatus

    with rls.tenant_scope(tenant_id):
        evaluation = Evaluation.objects.select_related("dataset", "agent", "tenant")
        evaluation = evaluation.filter(pk=evaluation_id).first()
        if evaluation is None:
            return "gone"
        evaluation = evaluation_advance(evaluation)
    if evaluation.status == EvaluationStatus.RUNNING:
        advance_evaluation_task.apply_async(
            (evaluation_id, tenant_id), countdown=settings.EVALUATION_STEP_S
        )
    return evaluation.status


@receiver(evaluation_due, dispatch_uid="agents-evaluation-due")
def _advance_evaluation(
    sender, evaluation_id: int, tenant_id: int, delay_s: float = 0, **kwargs
) -> None:
    advance_evaluation_task.apply_async((evaluation_id, tenant_id), countdown=delay_s or None)


@shared_task(name="agents.resume_evaluations", ignore_result=True)
def resume_evaluations() -> int:
    """Advance the running evaluations nobody advanced for a minute (their step's message
    was lost with a worker)."""
    from agents.models import Evaluation, EvaluationStatus

    with rls.owner():
        stale = Evaluation.objects.filter(
            status=EvaluationStatus.RUNNING, updated_at__lt=Now() - timedelta(seconds=60)
        ).values_list("pk", "tenant_id")[:500]
        for evaluation_id, tenant_id in stale:
            advance_evaluation_task.delay(evaluation_id, tenant_id)
        return len(stale)


@shared_task(name="agents.verify_outcome", ignore_result=True)
def verify_outcome_task(run_id: int, tenant_id: int) -> None:
    """The agent's verifying tool checks a succeeded run's outcome claim."""
    with rls.tenant_scope(tenant_id):
        run = (
            Run.objects.select_related(
                "agent", "tenant", "initiated_by_user", "initiated_by_api_key"
            )
            .filter(pk=run_id)
            .first()
        )
        if run is not None:
            verify_with_tool(run)


# Named for the tools it checks (beat and the batch queue's route know it by this name); it
# lives here because each example is a direct call, which is the agents app's.
@shared_task(name="tools.selftest_tools", ignore_result=True)
def selftest_all_tenants() -> int:
    """Run every tenant's tool self-tests as the platform (beat: TOOL_SELFTEST_S); the
    tools' health."""
    with rls.owner():  # which tenants there are
        tenant_ids = list(Tenant.objects.values_list("pk", flat=True))
    checked = 0
    for tenant_id in tenant_ids:
        with rls.tenant_scope(tenant_id):
            checked += len(selftest_tools(Tenant.objects.get(pk=tenant_id)))
    return checked


@shared_task(name="agents.check_remote_agents", ignore_result=True)
def check_remote_agents_task() -> int:
    """Every active remote agent's health (beat: REMOTE_AGENT_HEALTH_S)."""
    return check_remote_agents()


@receiver(run_succeeded, dispatch_uid="agents-run-succeeded")
def _verify_outcome(sender, run_id: int, tenant_id: int, **kwargs) -> None:
    verify_outcome_task.delay(run_id, tenant_id)


@signals.worker_process_shutdown.connect  # a prefork pool's process
@signals.worker_shutdown.connect  # a solo worker (its runs live in the worker itself)
def _hand_over_held_runs(**kwargs) -> None:
    drain(settings.RUN_DRAIN_S)


@shared_task(name="agents.sweep_stale_runs", ignore_result=True)
def sweep_stale_runs() -> int:
    """Ask again for the runs whose worker died (agents.runs.sweeper)."""
    runs = stale_runs()
    for run_id in runs:
        send_run(run_id, None, queue=settings.RUNS_QUEUE)
    return len(runs)


@shared_task(name="agents.fire_due_triggers", ignore_result=True)
def fire_due_triggers_task() -> int:
    """Start the runs of the schedules that are due (beat: TRIGGER_TICK_S). Any number of
    beats may send it: each due fire time is claimed once in PostgreSQL (agents.triggers)."""
    from agents.triggers import fire_due_triggers

    return fire_due_triggers()


@shared_task(
    name="agents.read_attachment", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def read_attachment_task(attachment_id: int, tenant_id: int | None = None) -> str:
    """Read a large attached document (agents.conversations.attachment_read: idempotent; a
    second delivery finds it read and does nothing)."""
    if tenant_id is None:
        tenant_id = rls.tenant_id_of(Attachment, attachment_id)
        if tenant_id is None:
            return "skipped"
    with rls.tenant_scope(tenant_id):
        return attachment_read(attachment_id)


@receiver(attachment_to_read, dispatch_uid="agents-attachment-to-read")
def _read_in_a_worker(sender, attachment_id: int, tenant_id: int, **kwargs) -> None:
    read_attachment_task.delay(attachment_id, tenant_id)


@shared_task(name="agents.sweep_stale_attachment_readings", ignore_result=True)
def sweep_stale_attachment_readings() -> int:
    """Ask again for the documents whose reading's worker died (beat, every minute)."""
    again = attachment_readings_stale()
    for attachment_id, tenant_id in again:
        read_attachment_task.delay(attachment_id, tenant_id)
    return len(again)


@shared_task(name="agents.purge_expired_facts", ignore_result=True)
def purge_expired_facts() -> int:
    """Delete the remembered facts past their agent's retention, in batches, audited
    (agents.memory). Recall never reads them meanwhile."""
    with rls.owner():  # across tenants; each tenant's purge has its own audit entry
        return facts_expired_purge()
