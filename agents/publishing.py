"""Publishing only what passes: an agent or a crew with a required evaluation
(`required_evaluation`, a dataset, and `pass_threshold`) never takes a change of its
behaviour directly. `agent_save` and `crew_save` (every face: page, REST, configuration
document, a restore of a configuration version; the Django admin, which saves models directly,
shows a gated one read-only: agents/publishing_admin.py) hand the change here: it is
validated as any save is, stored as a draft (`AgentDraft`, the fields it changes as a
configuration version's snapshot holds them, and the parts it sets: an agent's skill pins, a
crew's members), and an evaluation of the draft starts. The evaluation's runs execute the
agent or crew as drafted (`Run.agent_draft`, set only by the evaluation: a chat never runs a
draft). When the evaluation completes, a score (cases passed / cases) at or above the
threshold publishes the draft: it is saved through the ordinary save (a new version, an
audit entry "published after evaluation N scored X"); below, it stays a failed draft.

An admin whose key or session may override (`Action.OVERRIDE_EVALUATION`) publishes a failed,
unevaluated or still-evaluating draft with a reason, or anyone who may change the agent
discards it; both are in the audit log. One pending draft per agent or crew: a newer change
replaces it (its evaluation is cancelled); the same change again keeps it (a re-import of a
document does not restart its evaluation).

Skill pins of a gated agent are stored by number: `name@latest` is proposed as the latest
approved version now, so a version approved later reaches the agent only as a change of its
own, drafted and evaluated (docs/evaluations.md).

Not drafted, applied at once: the gate itself (`required_evaluation`, `pass_threshold`),
`active` (switching off must not wait) and the remote token (a credential, never in a
snapshot). A new agent or crew is not gated: there is no live version to protect yet.
Weakening the gate (`gate_weakened`: removing it, another dataset, a lower threshold) is
the override's right, not `change_config`'s, and is audited as one (`gate_check`); raising
the threshold or gating an agent needs only `change_config`. docs/evaluations.md describes it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from agents import skills
from agents.draft_runs import skills_tried
from agents.evaluations import evaluation_start
from agents.models import (
    PENDING_DRAFT,
    Agent,
    AgentDraft,
    Crew,
    DraftStatus,
    Evaluation,
    EvaluationStatus,
    crew_members_replacer,
)
from agents.selectors import crew_member_slugs, crew_members_named
from tenancy.models import AuditAction, ConfigVersion, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit, history
from tenancy.records.saving import save_validated

DIRECT = frozenset({"required_evaluation", "pass_threshold", "active", "remote_token"})
GATE = ("required_evaluation", "pass_threshold")  # a restore keeps the gate as it is
MAX_REASON = 2000
Target = Agent | Crew
WEAKEN_REFUSED = (
    "Lowering or removing a required evaluation needs the right to override evaluations."
)


def gated(target: Target) -> bool:
    return target.pk is not None and target.required_evaluation_id is not None


def _of(target: Target) -> dict[str, Target]:
    return {"crew": target} if isinstance(target, Crew) else {"agent": target}


# -- proposing ------------------------------------------------------------------------------
def agent_propose(
    *,
    tenant: Tenant,
    agent: Agent,
    changes: dict[str, Any],
    pins: list[skills.Pin] | None = None,
    graph_checked: bool = False,
    by: Principal | None = None,
) -> Agent:
    """A change to a gated agent: validated as a save is (full_clean, the tenant's whole
    configuration compiled with it; `pins` by the rules of `agent_skills_set`), its gate
    weakened only by whom `gate_check` lets (`by`; None: the platform itself), then its
    direct fields saved and the rest stored as a draft under evaluation. Returns the live
    agent as stored, with `pending_draft` (the draft, or None when nothing was drafted).
    `agent` itself is not saved (a form may have set the proposed values on it)."""
    live = Agent.objects.get(pk=agent.pk)
    candidate = Agent.objects.get(pk=agent.pk)
    for name, value in changes.items():
        setattr(candidate, name, value)
    candidate.graph_checked = graph_checked
    candidate.full_clean()
    parts: dict[str, list[str]] = {}
    if pins is not None:
        before, after = skills.agent_pin_labels(live), pins_fixed(tenant, live, pins)
        if after != before:
            parts["skills"] = after
    return _propose(tenant, live, candidate, changes, parts, graph_checked, by)


def crew_propose(
    *,
    tenant: Tenant,
    crew: Crew,
    changes: dict[str, Any],
    members: list[Agent] | None = None,
    graph_checked: bool = False,
    by: Principal | None = None,
) -> Crew:
    """A change to a gated crew, as `agent_propose`: its fields, and `members` (in order)."""
    live = Crew.objects.get(pk=crew.pk)
    candidate = Crew.objects.get(pk=crew.pk)
    for name, value in changes.items():
        setattr(candidate, name, value)
    candidate.graph_checked, candidate.pending_members = graph_checked, members
    candidate.full_clean()
    parts: dict[str, list[str]] = {}
    if members is not None:
        slugs = [agent.slug for agent in members]
        if slugs != crew_member_slugs(live):
            parts["members"] = slugs
    return _propose(tenant, live, candidate, changes, parts, graph_checked, by)


def _propose(
    tenant: Tenant,
    live: Target,
    candidate: Target,
    changes: dict[str, Any],
    parts: dict[str, list[str]],
    graph_checked: bool,
    by: Principal | None,
) -> Target:
    weakened = gate_check(live, changes, by)
    before = history.snapshot(live)
    after = history.snapshot(candidate)["fields"]
    drafted = {
        name: value
        for name, value in after.items()
        if name not in DIRECT and value != before["fields"].get(name)
    }
    direct = {name: value for name, value in changes.items() if name in DIRECT}
    with transaction.atomic():
        if direct:
            live.graph_checked = graph_checked
            live = save_validated(live, direct)
        if weakened:
            _gate_record(live, weakened, by)
        draft = None
        if (drafted or parts) and not gated(live):  # this change lifted the gate: as before it
            _apply(live, drafted, parts, actor=None)
        elif drafted or parts:
            change = {name: [before["fields"].get(name), value] for name, value in drafted.items()}
            old_parts = before.get("parts", {})
            change |= {name: [old_parts.get(name), value] for name, value in parts.items()}
            draft = _draft_replace(tenant, live, drafted, parts, change)
    live.pending_draft = draft
    return live


def gate_weakened(live: Target, changes: dict[str, Any]) -> str:
    """How `changes` weaken the gate of `live` (gated now), or "": removing its required
    evaluation, naming another dataset (which may be easier: no two datasets compare) or a
    lower threshold. The same dataset with a threshold as high or higher does not."""
    if "required_evaluation" in changes:
        dataset = changes["required_evaluation"]
        if dataset is None:
            return "removed its required evaluation"
        if getattr(dataset, "pk", dataset) != live.required_evaluation_id:
            return f"replaced its required evaluation by dataset {dataset}"
    threshold = changes.get("pass_threshold", live.pass_threshold)
    if isinstance(threshold, int | float) and threshold < live.pass_threshold:
        return f"lowered its pass threshold from {live.pass_threshold:g} to {threshold:g}"
    return ""


def gate_check(live: Target, changes: dict[str, Any], by: Principal | None) -> str:
    """PermissionDenied unless `by` may weaken the gate as `changes` would: the right to
    override evaluations (`change_config` alone would lift the gate, then change the agent
    freely), or None (the platform itself: seeds, an operator's command). Returns how it
    is weakened ("": not), for `_gate_record`."""
    weakened = gate_weakened(live, changes) if gated(live) else ""
    if weakened and by is not None and not by.may(Action.OVERRIDE_EVALUATION):
        raise PermissionDenied(WEAKEN_REFUSED)
    return weakened


def _gate_record(live: Target, weakened: str, by: Principal | None) -> None:
    """The weakened gate in the audit log, as an override is: who, and what they did (the
    ordinary save's `config.changed` lists the fields too)."""
    who = by.label if by is not None else "platform"
    audit.record(
        tenant=live.tenant_id,
        action=AuditAction.CONFIG_CHANGED,
        actor=by.initiator if by is not None else None,
        obj=live,
        details={"decision": f"{who} {weakened}, overriding the publish gate"},
    )


def pins_fixed(tenant: Tenant, agent: Agent, pins: list[skills.Pin]) -> list[str]:
    """The labels `pins` would store on the gated `agent`, `@latest` as the number it
    resolves to now (checked by `agent_skills_set`'s rules; nothing changed)."""
    labels = [pin.label for pin in pins]
    return sorted(skills.Pin(s.name, s.number).label for s in skills_tried(agent, labels))


def pins_freeze(tenant: Tenant, agent: Agent) -> None:
    """An agent just gated: its `@latest` pins stored as the numbers they resolve to now
    (the same skills; a new version approved later then reaches it only as a change of its
    own, drafted and evaluated). One query when it has none."""
    labels = skills.agent_pin_labels(agent)
    if not any(label.endswith("@latest") for label in labels):
        return
    fixed = pins_fixed(tenant, agent, skills.pins_parsed(tenant, labels))
    skills.agent_skills_set(
        tenant=tenant, by=None, agent=agent, pins=skills.pins_parsed(tenant, fixed)
    )


def _draft_replace(
    tenant: Tenant,
    live: Target,
    fields: dict[str, Any],
    parts: dict[str, list[str]],
    changes: dict[str, list],
) -> AgentDraft:
    pending = (
        AgentDraft.objects.select_for_update().filter(**_of(live), status__in=PENDING_DRAFT).first()
    )
    if pending is not None and pending.fields == fields and pending.parts == parts:
        return pending  # the same change again: its evaluation goes on
    if pending is not None:
        _close(pending, DraftStatus.REPLACED, by=None, reason="replaced by a newer change")
    draft = AgentDraft(
        tenant=tenant,
        **_of(live),
        fields=fields,
        parts=parts,
        changes=changes,
        based_on=_live_number(live),
        threshold=live.pass_threshold,
    )
    audit.set_actor(draft)
    draft.save(force_insert=True)
    _evaluate(tenant, live, draft)
    return draft


def _evaluate(tenant: Tenant, live: Target, draft: AgentDraft) -> None:
    """Start the draft's evaluation (dispatched on commit); a dataset that cannot be run
    (no cases, an inactive agent) leaves it unevaluated, for an admin to decide."""
    try:
        with transaction.atomic():
            evaluation = evaluation_start(
                tenant=tenant, dataset=live.required_evaluation, by=None, draft=draft, **_of(live)
            )
    except ValidationError as exc:
        draft.status = DraftStatus.UNEVALUATED
        draft.note = " ".join(exc.messages)[:300]
        draft.save(update_fields=["status", "note"])
        _record(draft, f"proposed as draft {draft.pk}; not evaluated: {draft.note}")
        return
    draft.evaluation = evaluation
    draft.save(update_fields=["evaluation"])
    _record(draft, f"proposed as draft {draft.pk}; evaluation {evaluation.pk} started")


def restore_changes(target: Target, changes: dict[str, Any]) -> dict[str, Any]:
    """A configuration version restored on a gated agent or crew keeps today's gate: the
    version's other settings become a draft, evaluated against it."""
    stored = type(target).objects.filter(pk=target.pk, required_evaluation__isnull=False)
    if not stored.exists():
        return dict(changes)
    return {name: value for name, value in changes.items() if name not in GATE}


# -- the evaluation's end --------------------------------------------------------------------
def draft_evaluated(evaluation: Evaluation, **kwargs: Any) -> None:
    """The draft's evaluation ended (`agents.signals.evaluation_ended`, connected in
    AgentsConfig.ready, so that evaluations need not import this module): completed at or
    above the threshold, publish it; below, it fails; cancelled, it stays unevaluated.
    Idempotent (a draft decided, or replaced meanwhile, is left as it is)."""
    if evaluation.draft_id is None or evaluation.status == EvaluationStatus.RUNNING:
        return
    with transaction.atomic():
        draft = (
            AgentDraft.objects.select_for_update()
            .filter(pk=evaluation.draft_id, evaluation=evaluation, status=DraftStatus.EVALUATING)
            .first()
        )
        if draft is None:
            return
        if evaluation.status == EvaluationStatus.CANCELLED:
            draft.status, draft.note = DraftStatus.UNEVALUATED, "its evaluation was cancelled"
            draft.save(update_fields=["status", "note"])
            _record(draft, f"draft {draft.pk}: its evaluation {evaluation.pk} was cancelled")
            return
        draft.score = evaluation.passed / evaluation.cases if evaluation.cases else 0.0
        said = f"evaluation {evaluation.pk} scored {draft.score:.2f}"
        if draft.score < draft.threshold:
            draft.status, draft.decided_at = DraftStatus.FAILED, timezone.now()
            draft.save(update_fields=["status", "score", "decided_at"])
            _record(draft, f"draft {draft.pk} not published: {said}, below {draft.threshold:.2f}")
            return
        try:
            with transaction.atomic():
                _publish(draft, actor=f"evaluation {evaluation.pk}", said=f"published after {said}")
        except ValidationError as exc:  # the configuration changed under it meanwhile
            draft.status, draft.decided_at = DraftStatus.FAILED, timezone.now()
            draft.note = f"passed, but cannot be saved now: {' '.join(exc.messages)}"[:300]
            draft.save(update_fields=["status", "score", "decided_at", "note"])
            _record(draft, f"draft {draft.pk} not published: {draft.note}")


# -- deciding -------------------------------------------------------------------------------
def draft_publish(*, tenant: Tenant, draft: AgentDraft, by: Principal, reason: str) -> AgentDraft:
    """An override: publish a pending draft that has not passed (failed, unevaluated, or
    still being evaluated: its evaluation is cancelled), with a reason for the audit log.
    ValidationError for a draft decided already, or no reason; 404 for another tenant's."""
    if draft.tenant_id != tenant.pk:
        raise Http404("No such draft.")
    by.require(Action.CHANGE_CONFIG)
    by.require(Action.OVERRIDE_EVALUATION)
    reason = _reason(reason, required=True)
    with transaction.atomic():
        draft = _locked_pending(draft)
        _cancel_evaluation(draft)
        _publish(
            draft,
            actor=by.initiator,
            said=f"published by {by.label}, overriding its evaluation: {reason}",
            reason=reason,
            decided_by=by.label,
        )
    return draft


def draft_discard(
    *, tenant: Tenant, draft: AgentDraft, by: Principal, reason: str = ""
) -> AgentDraft:
    """Drop a pending draft (its evaluation cancelled); the live agent is unchanged."""
    if draft.tenant_id != tenant.pk:
        raise Http404("No such draft.")
    by.require(Action.CHANGE_CONFIG)
    reason = _reason(reason, required=False)
    with transaction.atomic():
        draft = _locked_pending(draft)
        _close(draft, DraftStatus.DISCARDED, by=by, reason=reason or "discarded")
    return draft


def _reason(value: Any, *, required: bool) -> str:
    if not isinstance(value, str) or "\x00" in value:
        raise ValidationError({"reason": "A text."})
    value = value.strip()
    if required and not value:
        raise ValidationError({"reason": "Say why this draft is published without passing."})
    if len(value) > MAX_REASON:
        raise ValidationError({"reason": f"At most {MAX_REASON} characters."})
    return value


def _locked_pending(draft: AgentDraft) -> AgentDraft:
    locked = AgentDraft.objects.select_for_update().get(pk=draft.pk)
    if not locked.pending:
        raise ValidationError(f"This draft is {locked.get_status_display().lower()} already.")
    return locked


def _publish(
    draft: AgentDraft, *, actor: Any, said: str, reason: str = "", decided_by: str = ""
) -> None:
    """Save the draft on the live agent or crew through the ordinary save (past the gate):
    its validation, a new version, the audit entry of the change; then the decision's."""
    target = draft.target
    live = type(target).objects.select_for_update().get(pk=target.pk)
    _apply(live, draft.fields, draft.parts, actor=actor)
    draft.status, draft.decided_at = DraftStatus.PUBLISHED, timezone.now()
    draft.reason, draft.decided_by_label = reason, decided_by or str(actor)[:200]
    draft.published_version = _live_number(live)
    draft.save()
    _record(draft, said, actor=actor)


def _apply(live: Target, fields: dict[str, Any], parts: dict[str, list[str]], actor: Any) -> None:
    """Fields and parts as snapshots hold them, saved on `live` past the gate: the fields
    (and a crew's members) through save_validated, an agent's pins through agent_skills_set."""
    tenant = live.tenant
    changes = history.restorable_changes(
        history.kind_of(type(live)), tenant, live, {"fields": fields}
    )
    after = None
    if "members" in parts:
        members = crew_members_named(tenant, parts["members"])
        live.pending_members = members
        after = crew_members_replacer(tenant, members)
    save_validated(live, changes, actor=actor, after=after)
    if "skills" in parts:
        pins = skills.pins_parsed(tenant, parts["skills"])
        skills.agent_skills_set(tenant=tenant, by=None, agent=live, pins=pins)


def _close(draft: AgentDraft, status: str, *, by: Principal | None, reason: str) -> None:
    _cancel_evaluation(draft)
    draft.status, draft.decided_at, draft.reason = status, timezone.now(), reason
    draft.decided_by_label = by.label if by is not None else ""
    draft.save(update_fields=["status", "decided_at", "reason", "decided_by_label"])
    who = f" by {by.label}" if by is not None else ""
    _record(draft, f"draft {draft.pk} {status}{who}: {reason}", actor=by.initiator if by else None)


def _cancel_evaluation(draft: AgentDraft) -> None:
    if draft.evaluation_id is not None:
        Evaluation.objects.filter(pk=draft.evaluation_id, status=EvaluationStatus.RUNNING).update(
            status=EvaluationStatus.CANCELLED, finished_at=timezone.now()
        )


def _live_number(target: Target) -> int:
    latest = ConfigVersion.objects.filter(
        tenant_id=target.tenant_id,
        object_type=target._meta.label_lower,
        object_id=str(target.pk),
    ).order_by("-number")
    return latest.values_list("number", flat=True).first() or 0


def _record(draft: AgentDraft, decision: str, actor: Any = None) -> None:
    details = {"draft": draft.pk, "decision": decision, "status": draft.status}
    if draft.evaluation_id is not None:
        details["evaluation"] = draft.evaluation_id
    if draft.score is not None:
        details["score"] = round(draft.score, 4)
    audit.record(
        tenant=draft.tenant_id,
        action=AuditAction.CONFIG_CHANGED,
        actor=actor,
        obj=draft.target,
        details=details,
    )


# -- reading --------------------------------------------------------------------------------
def agent_drafts(*, tenant: Tenant, agent: Target) -> list[AgentDraft]:
    """The agent's (or crew's) drafts, newest first (the last 50). One query."""
    if agent.tenant_id != tenant.pk:
        raise Http404("No such agent.")
    return list(AgentDraft.objects.filter(**_of(agent)).select_related("evaluation")[:50])


def agent_draft_get(*, tenant: Tenant, agent: Target, draft_id: Any) -> AgentDraft:
    """One of the agent's (or crew's) drafts; 404 for another's or tenant's, or a bad id."""
    text = str(draft_id)
    if not text.isdigit() or not 0 < int(text) < 2**63 or agent.tenant_id != tenant.pk:
        raise Http404("No such draft.")
    draft = AgentDraft.objects.filter(tenant=tenant, **_of(agent), pk=int(text)).first()
    if draft is None:
        raise Http404("No such draft.")
    return draft


def pending_draft(target: Target) -> AgentDraft | None:
    """The agent's or crew's pending draft, if any. One query."""
    pending = AgentDraft.objects.filter(**_of(target), status__in=PENDING_DRAFT)
    return pending.select_related("evaluation").first()


def live_score(target: Target) -> float | None:
    """The live version's last score on the required dataset: the latest completed
    evaluation of the agent (or crew) itself there, or of the draft it published. One
    query."""
    if target.required_evaluation_id is None:
        return None
    latest = (
        Evaluation.objects.filter(
            **_of(target),
            dataset_id=target.required_evaluation_id,
            status=EvaluationStatus.COMPLETED,
        )
        .exclude(draft__status__in=[*PENDING_DRAFT, DraftStatus.DISCARDED, DraftStatus.REPLACED])
        .order_by("-finished_at", "-pk")
        .values_list("passed", "cases")
        .first()
    )
    if latest is None or not latest[1]:
        return None
    return latest[0] / latest[1]
