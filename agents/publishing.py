"""Publishing only what passes: an agent with a required evaluation (`Agent.required_evaluation`,
a dataset, and `pass_threshold`) never takes a change of its behaviour directly. `agent_save`
(every face: page, REST, admin, configuration document, a restore) hands the change here: it is
validated as any save is, stored as a draft (`AgentDraft`, the fields it changes as a
configuration version's snapshot holds them), and an evaluation of the draft starts. The
evaluation's runs execute the agent as drafted (`Run.agent_draft`, set only by the evaluation:
a chat never runs a draft). When the evaluation completes, a score (cases passed / cases) at or
above the threshold publishes the draft: it is saved through the ordinary save (a new version,
an audit entry "published after evaluation N scored X"); below, it stays a failed draft.

An admin whose key or session may override (`Action.OVERRIDE_EVALUATION`) publishes a failed,
unevaluated or still-evaluating draft with a reason, or anyone who may change the agent
discards it; both are in the audit log. One pending draft per agent: a newer change replaces
it (its evaluation is cancelled); the same change again keeps it (a re-import of a document
does not restart its evaluation).

Not drafted, applied at once: the gate itself (`required_evaluation`, `pass_threshold`),
`active` (switching an agent off must not wait) and the remote token (a credential, never in a
snapshot). A new agent is not gated: there is no live version to protect yet.
docs/evaluations.md describes it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from agents.evaluations import evaluation_start
from agents.models import (
    PENDING_DRAFT,
    Agent,
    AgentDraft,
    DraftStatus,
    Evaluation,
    EvaluationStatus,
)
from tenancy.models import AuditAction, ConfigVersion, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit, history
from tenancy.records.saving import save_validated

DIRECT = frozenset({"required_evaluation", "pass_threshold", "active", "remote_token"})
MAX_REASON = 2000


def gated(agent: Agent) -> bool:
    return agent.pk is not None and agent.required_evaluation_id is not None


# -- proposing ------------------------------------------------------------------------------
def agent_propose(
    *, tenant: Tenant, agent: Agent, changes: dict[str, Any], graph_checked: bool = False
) -> Agent:
    """A change to a gated agent: validated as a save is (full_clean, the tenant's whole
    configuration compiled with it), then its direct fields saved and the rest stored as a
    draft under evaluation. Returns the live agent as stored, with `pending_draft` (the
    draft, or None when nothing was drafted). `agent` itself is not saved (a form may have
    set the proposed values on it)."""
    live = Agent.objects.get(pk=agent.pk)
    candidate = Agent.objects.get(pk=agent.pk)
    for name, value in changes.items():
        setattr(candidate, name, value)
    candidate.graph_checked = graph_checked
    candidate.full_clean()
    before = history.snapshot(live)["fields"]
    after = history.snapshot(candidate)["fields"]
    drafted = {
        name: value
        for name, value in after.items()
        if name not in DIRECT and value != before.get(name)
    }
    direct = {name: value for name, value in changes.items() if name in DIRECT}
    with transaction.atomic():
        if direct:
            live.graph_checked = graph_checked
            live = save_validated(live, direct)
        draft = None
        if drafted:
            change = {name: [before.get(name), value] for name, value in drafted.items()}
            draft = _draft_replace(tenant, live, drafted, change)
    live.pending_draft = draft
    return live


def _draft_replace(
    tenant: Tenant, live: Agent, fields: dict[str, Any], changes: dict[str, list]
) -> AgentDraft:
    pending = (
        AgentDraft.objects.select_for_update().filter(agent=live, status__in=PENDING_DRAFT).first()
    )
    if pending is not None and pending.fields == fields:
        return pending  # the same change again: its evaluation goes on
    if pending is not None:
        _close(pending, DraftStatus.REPLACED, by=None, reason="replaced by a newer change")
    draft = AgentDraft(
        tenant=tenant,
        agent=live,
        fields=fields,
        changes=changes,
        based_on=_live_number(live),
        threshold=live.pass_threshold,
    )
    audit.set_actor(draft)
    draft.save(force_insert=True)
    _evaluate(tenant, live, draft)
    return draft


def _evaluate(tenant: Tenant, live: Agent, draft: AgentDraft) -> None:
    """Start the draft's evaluation (dispatched on commit); a dataset that cannot be run
    (no cases, an inactive agent) leaves it unevaluated, for an admin to decide."""
    try:
        with transaction.atomic():
            evaluation = evaluation_start(
                tenant=tenant, dataset=live.required_evaluation, agent=live, by=None, draft=draft
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
    """Save the draft's fields on the live agent through the ordinary save (past the gate):
    its validation, a new version, the audit entry of the change; then the decision's."""
    live = Agent.objects.select_for_update().get(pk=draft.agent_id)
    changes = history.restorable_changes(
        history.kind_of(Agent), draft.agent.tenant, live, {"fields": draft.fields}
    )
    save_validated(live, changes, actor=actor)
    draft.status, draft.decided_at = DraftStatus.PUBLISHED, timezone.now()
    draft.reason, draft.decided_by_label = reason, decided_by or str(actor)[:200]
    draft.published_version = _live_number(live)
    draft.save()
    _record(draft, said, actor=actor)


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


def _live_number(agent: Agent) -> int:
    latest = ConfigVersion.objects.filter(
        tenant_id=agent.tenant_id, object_type="agents.agent", object_id=str(agent.pk)
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
        obj=draft.agent,
        details=details,
    )


# -- reading --------------------------------------------------------------------------------
def agent_drafts(*, tenant: Tenant, agent: Agent) -> list[AgentDraft]:
    """The agent's drafts, newest first (the last 50). One query."""
    if agent.tenant_id != tenant.pk:
        raise Http404("No such agent.")
    return list(AgentDraft.objects.filter(agent=agent).select_related("evaluation")[:50])


def agent_draft_get(*, tenant: Tenant, agent: Agent, draft_id: Any) -> AgentDraft:
    """One of the agent's drafts; 404 for another agent's or tenant's, or a bad id."""
    text = str(draft_id)
    if not text.isdigit() or not 0 < int(text) < 2**63 or agent.tenant_id != tenant.pk:
        raise Http404("No such draft.")
    draft = AgentDraft.objects.filter(tenant=tenant, agent=agent, pk=int(text)).first()
    if draft is None:
        raise Http404("No such draft.")
    return draft


def pending_draft(agent: Agent) -> AgentDraft | None:
    """The agent's pending draft, if any. One query."""
    pending = AgentDraft.objects.filter(agent=agent, status__in=PENDING_DRAFT)
    return pending.select_related("evaluation").first()


def live_score(agent: Agent) -> float | None:
    """The live version's last score on the required dataset: the latest completed
    evaluation of the agent itself there, or of the draft it published. One query."""
    if agent.required_evaluation_id is None:
        return None
    latest = (
        Evaluation.objects.filter(
            agent=agent, dataset_id=agent.required_evaluation_id, status=EvaluationStatus.COMPLETED
        )
        .exclude(draft__status__in=[*PENDING_DRAFT, DraftStatus.DISCARDED, DraftStatus.REPLACED])
        .order_by("-finished_at", "-pk")
        .values_list("passed", "cases")
        .first()
    )
    if latest is None or not latest[1]:
        return None
    return latest[0] / latest[1]
