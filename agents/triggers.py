"""Triggers: runs of an agent, crew or workflow started on a schedule or by a signed webhook
(docs/triggers.md). Every face (web pages, REST, the admin, /hooks) calls these.

A trigger's runs go through `agents.runs.run_start` (a workflow's: `workflow_start`) like
any other run, attributed to the trigger's `run_as` member: their grants decide whether it
may start, approvals and limits apply as to a run they started themselves. A workflow's
input is the rendered template read as JSON (`{{payload}}`: a webhook's whole body), checked
against the workflow's input schema.

Schedules: `fire_due_triggers` (a beat task every TRIGGER_TICK_S) claims the due triggers
with `SELECT ... FOR UPDATE SKIP LOCKED`, advances each one's `next_fire_at` and starts its
run in the same transaction: however many beat or worker processes run it at once, a fire
time starts one run (the run's idempotency key, `trigger:<id>:<fire time>`, is the second
wall). Nothing lives in a process: a restart loses no due schedule. Fires missed while
nothing ran (downtime) start one run, not one per missed time, and the schedule resumes
from now.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from agents import access
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    Crew,
    Run,
    Trigger,
    TriggerKind,
    WorkflowDefinition,
)
from agents.runs import run_start, storable_text, workflow_start
from agents.runtime import triggers as rules
from base import rate_counters
from tenancy import rls
from tenancy.access import get_for_tenant
from tenancy.models import ROLE_RANK, AuditAction, Membership, Role, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit
from tenancy.records.saving import delete_recorded, save_validated

logger = logging.getLogger(__name__)

FIELDS = (
    "name", "kind", "agent", "crew", "workflow", "cron", "timezone", "input_template", "enabled",
)  # fmt: skip
TARGETS = ("agent", "crew", "workflow")  # a trigger starts exactly one of them
PUBLIC_ID = re.compile(r"^trg_[A-Za-z0-9_-]{16,36}$")


# -- selectors -----------------------------------------------------------------------------
def visible_triggers(principal: Principal) -> QuerySet[Trigger]:
    """The tenant's triggers, for whoever may read its configuration (secrets never shown)."""
    triggers = Trigger.objects.filter(tenant=principal.tenant).select_related(
        "agent", "crew", "workflow", "run_as"
    )
    return triggers if principal.may(Action.READ_CONFIG) else triggers.none()


def trigger_get(*, tenant: Tenant, trigger_id: Any) -> Trigger:
    """By id; 404 for another tenant's or anything that is not an id."""
    text = str(trigger_id)
    pk = int(text) if text.isascii() and text.isdigit() and len(text) < 19 else -1
    return get_for_tenant(
        Trigger.objects.select_related("agent", "crew", "workflow", "run_as"), tenant, pk=pk
    )


def trigger_runs(principal: Principal, trigger: Trigger) -> QuerySet[Run]:
    """The runs the trigger started that the principal may see, newest first."""
    return access.visible_runs(principal).filter(trigger=trigger).order_by("-id")


def hook_path(trigger: Trigger) -> str:
    return f"/hooks/{trigger.public_id}"


# -- writes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SavedTrigger:
    trigger: Trigger
    secret: str | None = None  # a new webhook's signing secret: shown once, then never


def trigger_save(
    *, tenant: Tenant, by: Principal, trigger: Trigger | None = None, changes: dict[str, Any]
) -> SavedTrigger:
    """Create (trigger None) or change a trigger. `changes` may hold the FIELDS and `run_as`
    (a member; default on creation: `by`'s user). `by` needs CHANGE_CONFIG, and may only
    attribute runs to a member whose role is not above their own, who may start the agent,
    crew or workflow. A new webhook gets its secret, returned once."""
    by.require(Action.CHANGE_CONFIG)
    creating = trigger is None
    if trigger is None:
        trigger = Trigger(tenant=tenant, public_id=_public_id(), created_by=by.user)
    elif trigger.tenant_id != tenant.pk:
        raise Http404("No such trigger.")
    unknown = set(changes) - {*FIELDS, "run_as"}
    if unknown:
        raise ValueError(f"Not trigger fields: {sorted(unknown)}")
    if not creating and "kind" in changes and changes["kind"] != trigger.kind:
        raise ValidationError({"kind": "A trigger keeps its kind: make a new one."})
    values = {name: changes[name] for name in FIELDS if name in changes}
    if any(target in values for target in TARGETS):  # naming one target clears the others
        for target in TARGETS:
            values.setdefault(target, None)
    run_as = changes.get("run_as", trigger.run_as if not creating else by.user)
    before_schedule = (trigger.cron, trigger.timezone, trigger.enabled)
    changed = {name for name, value in values.items() if getattr(trigger, name) != value}
    if run_as != (None if creating else trigger.run_as):
        changed.add("run_as")
    # Disabling is always allowed; anything else re-checks whom the runs are attributed to.
    only_disabling = not creating and changed <= {"enabled"} and not trigger_enabled(values)

    def check(saved: Trigger) -> None:
        trigger_check(saved, tenant=tenant, by=by, run_as=run_as, check_run_as=not only_disabling)
        saved.run_as = run_as
        schedule = (saved.cron, saved.timezone, saved.enabled)
        if saved.kind == TriggerKind.SCHEDULE and (creating or schedule != before_schedule):
            saved.next_fire_at = _next_fire(saved) if saved.enabled else None

    secret = None
    if creating and values.get("kind") == TriggerKind.WEBHOOK:
        secret = trigger.secret = _new_secret()
    saved = save_validated(trigger, values, before=check, actor=by.initiator)
    return SavedTrigger(saved, secret)


def trigger_rotate_secret(*, tenant: Tenant, by: Principal, trigger: Trigger) -> str:
    """A new signing secret for a webhook (the old one stops working at once); returned once."""
    by.require(Action.CHANGE_CONFIG)
    if trigger.tenant_id != tenant.pk:
        raise Http404("No such trigger.")
    if trigger.kind != TriggerKind.WEBHOOK:
        raise ValidationError({"kind": "Only a webhook trigger has a secret."})
    secret = _new_secret()
    with transaction.atomic():
        Trigger.objects.filter(pk=trigger.pk).update(secret=secret, updated_at=timezone.now())
        audit.record(
            tenant=tenant, action=AuditAction.CONFIG_CHANGED, actor=by.initiator, obj=trigger,
            changes={"secret": [audit.SET, audit.CHANGED]},  # (masked, as every secret)
        )  # fmt: skip
    trigger.secret = secret
    return secret


def trigger_delete(*, tenant: Tenant, by: Principal, trigger: Trigger) -> None:
    """Delete a trigger; its runs stay (no longer linked)."""
    by.require(Action.CHANGE_CONFIG)
    if trigger.tenant_id != tenant.pk:
        raise Http404("No such trigger.")
    delete_recorded(trigger, actor=by.initiator)


def trigger_enabled(values: dict[str, Any]) -> bool:
    return bool(values.get("enabled", True))


def trigger_check(
    trigger: Trigger, *, tenant: Tenant, by: Principal, run_as: Any, check_run_as: bool = True
) -> None:
    """The rules of a trigger with these values (ValidationError naming the fields): what
    `trigger_save` checks, for a form that shows them before saving (the admin's).
    `check_run_as` False: only disabling, which needs no authority over `run_as`."""
    errors = rules.trigger_problems(
        name=trigger.name, kind=trigger.kind, cron=trigger.cron, timezone=trigger.timezone,
        input_template=trigger.input_template, min_interval_s=_min_interval(),
        now=timezone.now(),
    )  # fmt: skip
    name = trigger.name or ""
    if "name" not in errors and (
        Trigger.objects.filter(tenant=tenant, name=name).exclude(pk=trigger.pk).exists()
    ):
        errors["name"] = "Another trigger of this workspace has this name."
    targets = [t for t in (trigger.agent, trigger.crew, trigger.workflow) if t is not None]
    target = targets[0] if len(targets) == 1 else None
    if target is None:
        errors["agent"] = "Choose one agent, one crew or one workflow."
    elif target.tenant_id != tenant.pk:
        errors["agent"] = "Choose one of this workspace's agents, crews or workflows."
    if check_run_as and "agent" not in errors and trigger.kind in TriggerKind.values:
        problem = _run_as_refusal(tenant, by, run_as, target)
        if problem:
            errors["run_as"] = problem
    if errors:
        raise ValidationError(errors)


def _run_as_refusal(
    tenant: Tenant, by: Principal, run_as: Any, target: Agent | Crew | WorkflowDefinition
) -> str:
    """Why runs may not be attributed to `run_as`, or ""."""
    if not isinstance(run_as, AbstractBaseUser):
        return "Name the member the runs are attributed to."
    membership = Membership.objects.filter(tenant=tenant, user=run_as).first()
    if membership is None:
        return "Choose a member of this workspace."
    is_self = by.user is not None and by.user.pk == run_as.pk
    if not is_self and ROLE_RANK[Role(membership.role)] > ROLE_RANK[Role(by.role)]:
        return "You may not attribute runs to a member with a higher role than yours."
    membership.tenant = tenant
    principal = Principal.of_membership(membership, run_as)
    if isinstance(target, WorkflowDefinition):
        if not access.may_start_workflow(principal, target):
            return f"{run_as.get_username()} may not start this workflow."
    elif not access.may_start(principal, target):
        return f"{run_as.get_username()} may not start this agent or crew."
    return ""


def _public_id() -> str:
    return "trg_" + secrets.token_urlsafe(18)


def _new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def _min_interval() -> int:
    return settings.TRIGGER_MIN_INTERVAL_S


def _next_fire(trigger: Trigger, after: datetime | None = None) -> datetime:
    return rules.next_fire(trigger.cron, trigger.timezone, after or timezone.now())


# -- firing schedules ----------------------------------------------------------------------
def fire_due_triggers(*, now: datetime | None = None, batch: int = 100) -> int:
    """Start one run for every enabled schedule whose fire time has come; returns how many
    were fired. Safe to call from any number of processes at once (see the module's doc)."""
    now = now or timezone.now()
    fired = 0
    with rls.owner():  # the schedules of every tenant
        while True:
            with transaction.atomic():
                due = list(
                    Trigger.objects.select_for_update(skip_locked=True, of=("self",))
                    .filter(kind=TriggerKind.SCHEDULE, enabled=True, next_fire_at__lte=now)
                    .select_related("tenant", "agent", "crew", "workflow", "run_as")
                    .order_by("next_fire_at")[:batch]
                )
                for trigger in due:
                    _fire_schedule(trigger, now)
            fired += len(due)
            if len(due) < batch:
                return fired


def _fire_schedule(trigger: Trigger, now: datetime) -> None:
    """Inside the claim's transaction: advance the trigger past `now` (missed fires are not
    repeated) and start its run for the fire time it was due at."""
    fire_at = trigger.next_fire_at
    try:
        trigger.next_fire_at = _next_fire(trigger, max(now, fire_at))
    except rules.TriggerRuleError as exc:  # (a schedule that stopped firing: disable it)
        trigger.next_fire_at, trigger.enabled = None, False
        trigger.last_error = str(exc)[:500]
    else:
        local = fire_at.astimezone(rules.zone(trigger.timezone))  # (as the cron reads it)
        context = {"trigger": {"name": trigger.name}, "fired_at": local.isoformat()}
        key = f"trigger:{trigger.pk}:{fire_at.strftime('%Y%m%dT%H%M%SZ')}"
        with contextlib.suppress(TriggerRefused):  # (recorded as its last error; goes on)
            _start(trigger, context, idempotency_key=key)
    trigger.last_fired_at = now
    trigger.save(update_fields=["next_fire_at", "enabled", "last_fired_at", "last_error"])


class TriggerRefused(Exception):
    """A run the trigger could not start, and why (recorded as the trigger's last error)."""


def _start(trigger: Trigger, context: dict[str, Any], *, idempotency_key: str) -> Run:
    """The trigger's run, through run_start (in a savepoint: a refusal keeps the claim)."""
    try:
        if trigger.run_as is None:
            raise PermissionDenied("The member the runs were attributed to is gone.")
        text = rules.render_input(trigger.input_template, context, max_chars=MAX_INPUT_CHARS)
        with transaction.atomic():
            if trigger.workflow_id is not None:
                return _start_workflow(trigger, text, idempotency_key)
            run = run_start(
                tenant=trigger.tenant,
                agent=trigger.agent,
                crew=trigger.crew,
                input=storable_text(text),
                initiated_by=trigger.run_as,
                idempotency_key=idempotency_key,
                trigger=trigger,
            )
    except (rules.TriggerRuleError, ValidationError, PermissionDenied, Http404) as exc:
        reason = " ".join(getattr(exc, "messages", None) or [str(exc)])
        if isinstance(exc, Http404):
            reason = "The member the runs are attributed to left the workspace."
        trigger.last_error = f"Not started: {reason}"[:500]
        logger.info("trigger %s: %s", trigger.pk, trigger.last_error)
        raise TriggerRefused(trigger.last_error) from None
    trigger.last_error = ""
    return run


def _start_workflow(trigger: Trigger, text: str, idempotency_key: str) -> Run:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ValidationError(
            "The mapped input is not JSON, which a workflow takes: write the template as "
            'JSON (e.g. {{payload}}, or {"city": "{{payload.city}}"}).'
        ) from None
    run = workflow_start(
        tenant=trigger.tenant,
        workflow=trigger.workflow,
        input=value,
        initiated_by=trigger.run_as,
        idempotency_key=idempotency_key,
        trigger=trigger,
    )
    trigger.last_error = ""
    return run


# -- webhooks --------------------------------------------------------------------------------
class HookRefused(Exception):
    """A webhook delivery refused: `status` is the HTTP answer, the message its reason."""

    def __init__(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Delivery:
    run: Run
    replayed: bool  # the same signed delivery again: the run it started before


def webhook_deliver(
    *, public_id: str, body: bytes, timestamp: str | None, signature: str | None
) -> Delivery:
    """Check a delivery to /hooks/<public_id> and start its run. Refusals (HookRefused):
    429 beyond TRIGGER_WEBHOOK_RATE_PER_MIN, 404 unknown, 401 unsigned, badly signed or
    outside the replay window, 409 disabled or the run refused, 400 not JSON. The same
    signed delivery twice (a retry) starts one run and answers it both times."""
    if not isinstance(public_id, str) or not PUBLIC_ID.match(public_id):
        raise HookRefused(404, "No such trigger.")
    count = rate_counters.hit(f"trigger-hook:{public_id}", 60)
    if count.value > settings.TRIGGER_WEBHOOK_RATE_PER_MIN:
        raise HookRefused(429, "Too many deliveries; retry later.", count.retry_after_s)
    with rls.owner():  # which tenant: the public id says
        trigger = (
            Trigger.objects.filter(public_id=public_id, kind=TriggerKind.WEBHOOK)
            .select_related("tenant", "agent", "crew", "workflow", "run_as")
            .first()
        )
    if trigger is None or not trigger.tenant.active:
        raise HookRefused(404, "No such trigger.")
    refusal = rules.signature_refusal(
        secret=trigger.secret or "", timestamp=timestamp, signature=signature, body=body,
        now=time.time(), tolerance_s=settings.TRIGGER_WEBHOOK_TOLERANCE_S,
    )  # fmt: skip
    if refusal or not trigger.secret:
        raise HookRefused(401, refusal or "This trigger has no secret.")
    if not trigger.enabled:
        raise HookRefused(409, "This trigger is disabled.")
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HookRefused(400, "The body must be JSON (UTF-8).") from None
    context = {
        "payload": payload,
        "trigger": {"name": trigger.name},
        "fired_at": timezone.now().isoformat(),
    }
    key = f"trigger:{trigger.pk}:{signature.strip().removeprefix('sha256=')[:64]}"
    with rls.tenant_scope(trigger.tenant_id):
        replayed = Run.objects.filter(tenant=trigger.tenant, idempotency_key=key).exists()
        try:
            run = _start(trigger, context, idempotency_key=key)
        except TriggerRefused as exc:
            Trigger.objects.filter(pk=trigger.pk).update(last_error=trigger.last_error)
            bad_input = "mapped input" in str(exc) or "does not fit the workflow" in str(exc)
            status = 400 if bad_input else 409
            raise HookRefused(status, str(exc)) from None
        Trigger.objects.filter(pk=trigger.pk).update(last_fired_at=timezone.now(), last_error="")
    return Delivery(run, replayed)
