"""Evaluations: a tenant's datasets of cases run against an agent, each case scored, the
runs kept, two evaluations compared case by case; and feedback on runs (thumbs), which can
add an exchange to a dataset. docs/evaluations.md describes it.

An evaluation is a record driven by `evaluation_advance`, which is idempotent and reads
everything from the database: it starts the runs of pending cases (at most
EVALUATION_CONCURRENCY at once, each with an idempotency key of its own, so two advances
never start a case twice) on the batch queue, scores the cases whose runs finished, and
completes the evaluation when none is left. A task calls it until then (agents.tasks), and
a periodic task picks up an evaluation nobody advanced for a while (a worker restarted).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from agents import access
from agents.judging import judge_answer
from agents.models import (
    Agent,
    AgentDraft,
    Case,
    CaseOutcome,
    Crew,
    Dataset,
    Evaluation,
    EvaluationResult,
    EvaluationStatus,
    Feedback,
    Rating,
    Run,
    Verdict,
    VerificationSource,
)
from agents.runs import execute_run, run_start
from agents.runtime.spec import RunStatus
from agents.signals import evaluation_ended, request_evaluation_step, request_execution
from agents.verification import MAX_NOTE, record_verdict
from tenancy.access import get_for_tenant
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Action, Principal
from tools.runtime.expectations import CASE_KINDS, MAX_TEXT, Expectation, ExpectationError

logger = logging.getLogger(__name__)

MAX_CASES = 1000  # per dataset
MAX_NOTE_FEEDBACK = 2000
UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING)
Initiator = AbstractBaseUser | ApiKey | None


def concurrency() -> int:
    return settings.EVALUATION_CONCURRENCY


# -- datasets and cases ---------------------------------------------------------------------
def parse_expect(data: Any) -> dict[str, Any]:
    """A case's expectation, checked: ValidationError({"expect": why}) otherwise."""
    try:
        return Expectation.parse(data, kinds=CASE_KINDS).to_dict()
    except ExpectationError as exc:
        raise ValidationError({"expect": str(exc)}) from None


def _text(value: Any, field: str, *, limit: int, required: bool = False) -> str:
    if not isinstance(value, str):
        raise ValidationError({field: "A text."})
    if "\x00" in value:
        raise ValidationError({field: "Text may not contain NUL characters."})
    if len(value) > limit:
        raise ValidationError({field: f"At most {limit} characters."})
    if required and not value.strip():
        raise ValidationError({field: "This field is required."})
    return value


def dataset_get(*, tenant: Tenant, name_or_id: Any) -> Dataset:
    """By name, or by id when it is all digits; 404 for another tenant's."""
    text = str(name_or_id)
    if text.isdigit():
        return get_for_tenant(Dataset, tenant, pk=int(text))
    return get_for_tenant(Dataset, tenant, name=text)


@transaction.atomic
def dataset_save(
    *, tenant: Tenant, dataset: Dataset | None = None, changes: dict[str, Any]
) -> Dataset:
    """Create or change a dataset (`name`, `description`, `judge_connection` — one of the
    tenant's connections or None — and `judge_model`)."""
    if dataset is not None and dataset.tenant_id != tenant.pk:
        raise Http404("No such dataset.")
    dataset = dataset or Dataset(tenant=tenant)
    for field in ("name", "description", "judge_model"):
        if field in changes:
            limit = {"name": 100, "description": 10_000, "judge_model": 200}[field]
            setattr(dataset, field, _text(changes[field], field, limit=limit).strip())
    if "judge_connection" in changes:
        connection = changes["judge_connection"]
        if connection is not None and connection.tenant_id != tenant.pk:
            raise ValidationError({"judge_connection": "Choose one of this tenant's connections."})
        dataset.judge_connection = connection
    dataset.full_clean(exclude=["tenant", "judge_connection"], validate_unique=False)
    clash = Dataset.objects.filter(tenant=tenant, name=dataset.name).exclude(pk=dataset.pk)
    if clash.exists():
        raise ValidationError({"name": "A dataset of this tenant already has this name."})
    dataset.save()
    return dataset


def dataset_delete(*, tenant: Tenant, dataset: Dataset) -> None:
    if dataset.tenant_id != tenant.pk:
        raise Http404("No such dataset.")
    dataset.delete()


def case_save(
    *, tenant: Tenant, dataset: Dataset, case: Case | None = None, changes: dict[str, Any]
) -> Case:
    """Create or change a case: `input` (text), `expect` (an expectation: exact, contains,
    regex, schema, succeeds or judge with a rubric), `name`."""
    if dataset.tenant_id != tenant.pk or (case is not None and case.dataset_id != dataset.pk):
        raise Http404("No such case.")
    if case is None:
        if dataset.cases.count() >= MAX_CASES:
            raise ValidationError({"dataset": f"A dataset holds at most {MAX_CASES} cases."})
        case = Case(tenant=tenant, dataset=dataset)
        if "input" not in changes or "expect" not in changes:
            missing = [f for f in ("input", "expect") if f not in changes]
            raise ValidationError(dict.fromkeys(missing, "This field is required."))
    if "input" in changes:
        case.input = _text(changes["input"], "input", limit=MAX_TEXT * 10, required=True)
    if "expect" in changes:
        case.expect = parse_expect(changes["expect"])
    if "name" in changes:
        case.name = _text(changes["name"], "name", limit=100).strip()
    if "source_run" in changes:
        case.source_run = changes["source_run"]
    case.save()
    Dataset.objects.filter(pk=dataset.pk).update(updated_at=timezone.now())
    return case


def case_delete(*, tenant: Tenant, case: Case) -> None:
    if case.tenant_id != tenant.pk:
        raise Http404("No such case.")
    case.delete()


# -- evaluations ----------------------------------------------------------------------------
def visible_evaluations(principal: Principal) -> QuerySet[Evaluation]:
    """As runs (READ_RUN): admins see every evaluation of the tenant, others those they
    started (an evaluation shows its runs' answers)."""
    evaluations = Evaluation.objects.filter(tenant=principal.tenant).select_related("dataset")
    if not principal.may(Action.READ_RUN):
        return evaluations.none()
    if principal.is_admin:
        return evaluations
    if principal.api_key is not None:
        return evaluations.filter(started_by_api_key=principal.api_key)
    return evaluations.filter(started_by_user=principal.user)


def visible_evaluation(principal: Principal, evaluation_id: Any) -> Evaluation:
    try:
        pk = int(str(evaluation_id))
    except ValueError:
        raise Http404("No such evaluation.") from None
    if not 0 < pk < 2**63:
        raise Http404("No such evaluation.")
    return get_for_tenant(visible_evaluations(principal), principal.tenant, pk=pk)


def evaluation_start(
    *,
    tenant: Tenant,
    dataset: Dataset,
    agent: Agent | None = None,
    by: Initiator,
    dispatch: bool = True,
    draft: AgentDraft | None = None,
    crew: Crew | None = None,
) -> Evaluation:
    """An evaluation of `agent` (or `crew`) over `dataset`'s cases, as they are now (copied
    into its results). `by` must be allowed to start it. `dispatch`: hand it to the batch
    workers once committed (the command's --wait advances it in its own process instead).
    `draft`: its runs execute the agent or crew as this draft has it (agents/publishing.py)."""
    target = agent if agent is not None else crew
    if target is None or dataset.tenant_id != tenant.pk or target.tenant_id != tenant.pk:
        raise Http404("No such dataset or agent.")
    what = "agent" if agent is not None else "crew"
    if by is not None:
        access.require_start(Principal.for_initiator(tenant, by), target)
    if not target.active:
        raise ValidationError({what: f"This {what} is not active."})
    cases = list(dataset.cases.all())
    if not cases:
        raise ValidationError({"dataset": "This dataset has no cases yet."})
    user = by if isinstance(by, AbstractBaseUser) else None
    key = by if isinstance(by, ApiKey) else None
    label = Principal.for_initiator(tenant, by).label if by is not None else "platform"
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            tenant=tenant,
            dataset=dataset,
            agent=agent,
            crew=crew,
            agent_slug=target.slug,
            agent_version=getattr(target, "version", 0),
            draft=draft,
            started_by_user=user,
            started_by_api_key=key,
            started_by_label=label[:200],
            cases=len(cases),
        )
        EvaluationResult.objects.bulk_create(
            EvaluationResult(
                tenant=tenant,
                evaluation=evaluation,
                case=case,
                position=index,
                input=case.input,
                expect=case.expect,
            )
            for index, case in enumerate(cases)
        )
        if dispatch:
            transaction.on_commit(lambda: request_evaluation_step(evaluation.pk, tenant.pk))
    return evaluation


def evaluation_cancel(*, tenant: Tenant, evaluation: Evaluation, by: Principal) -> Evaluation:
    """Stop starting cases; those running finish and are scored, the rest stay pending. The
    evaluation's starter or an admin (as cancelling a run); 404 for another tenant's."""
    if evaluation.tenant_id != tenant.pk:
        raise Http404("No such evaluation.")
    by.require(Action.CANCEL_RUN)
    started = by.is_initiator_of(evaluation.started_by_user_id, evaluation.started_by_api_key_id)
    if not (by.is_admin or started):
        raise PermissionDenied("Only the evaluation's starter or an admin can stop it.")
    Evaluation.objects.filter(pk=evaluation.pk, status=EvaluationStatus.RUNNING).update(
        status=EvaluationStatus.CANCELLED, finished_at=timezone.now()
    )
    evaluation.refresh_from_db()
    if evaluation.draft_id is not None:
        evaluation_ended.send(sender=Evaluation, evaluation=evaluation)
    return evaluation


def evaluation_advance(evaluation: Evaluation, *, inline: bool = False) -> Evaluation:
    """One step: score the cases whose runs finished, start pending ones (up to
    EVALUATION_CONCURRENCY in flight), and complete the evaluation when every case is
    scored. Idempotent; safe to call from several processes at once. `inline`: execute the
    runs it starts here, one after another (the command's --wait), not on the batch queue.
    Judge calls happen here, outside any transaction."""
    if evaluation.status != EvaluationStatus.RUNNING:
        _score_finished(evaluation)
        return _total(evaluation)
    _score_finished(evaluation)
    in_flight = evaluation.results.filter(outcome=CaseOutcome.RUNNING).count()
    room = max(concurrency() - in_flight, 0)
    pending = list(evaluation.results.filter(outcome=CaseOutcome.PENDING)[:room])
    started = [run for result in pending if (run := _start_case(evaluation, result)) is not None]
    if inline:
        for run in started:
            execute_run(run.pk)
        _score_finished(evaluation)
    return _total(evaluation)


def evaluation_run_to_end(evaluation: Evaluation) -> Evaluation:
    """Advance in this process until the evaluation completes (the command's --wait; tests).
    A case's run still queued (started by an earlier step) is executed here too (executing
    is idempotent: a run a worker already claimed is left to it, and waited for)."""
    while True:
        evaluation = evaluation_advance(evaluation, inline=True)
        if evaluation.status != EvaluationStatus.RUNNING:
            return evaluation
        waiting = evaluation.results.filter(outcome=CaseOutcome.RUNNING)
        queued = waiting.filter(run__status=RunStatus.QUEUED).values_list("run_id", flat=True)
        for run_id in list(queued):
            execute_run(run_id)
        if waiting.exists():
            time.sleep(0.2)


def _start_case(evaluation: Evaluation, result: EvaluationResult) -> Run | None:
    agent, crew = evaluation.agent, evaluation.crew
    by = evaluation.started_by_api_key or evaluation.started_by_user
    try:
        if agent is None and crew is None:
            raise ValidationError("The agent or crew was deleted.")
        with transaction.atomic():
            run = run_start(
                tenant=evaluation.tenant,
                agent=agent,
                crew=crew,
                input=result.input,
                initiated_by=by,
                idempotency_key=f"evaluation:{evaluation.pk}:{result.pk}",
                enqueue=False,
                agent_draft_id=evaluation.draft_id,  # (a draft's evaluation: it runs the draft)
            )
            claimed = EvaluationResult.objects.filter(
                pk=result.pk, outcome=CaseOutcome.PENDING
            ).update(run=run, outcome=CaseOutcome.RUNNING)
            if claimed and run.status == RunStatus.QUEUED:
                tenant_id = evaluation.tenant_id
                transaction.on_commit(lambda: request_execution(run.pk, tenant_id, batch=True))
        return run if claimed else None
    except (ValidationError, PermissionDenied, Http404) as exc:
        reason = " ".join(getattr(exc, "messages", None) or [str(exc)])
        EvaluationResult.objects.filter(pk=result.pk, outcome=CaseOutcome.PENDING).update(
            outcome=CaseOutcome.ERROR, reason=f"not started: {reason}"[:MAX_NOTE],
            scored_at=timezone.now(),
        )  # fmt: skip
        return None


def _score_finished(evaluation: Evaluation) -> None:
    waiting = evaluation.results.filter(outcome=CaseOutcome.RUNNING).select_related("run")
    for result in waiting:
        run = result.run
        if run is None:
            _store(result, CaseOutcome.ERROR, "the run was deleted", None)
        elif run.status not in UNFINISHED:
            _score(evaluation, result, run)


@dataclass(frozen=True)
class Score:
    outcome: str
    reason: str
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    judged: bool = True  # False: no verdict on the answer (a quota refused the judge)


def score_answer(evaluation: Evaluation, expect: dict[str, Any], run: Run) -> Score:
    """Whether the run's answer meets the expectation (one judge call for `judge`)."""
    expectation = Expectation.parse(expect, kinds=CASE_KINDS)
    if run.status == RunStatus.AWAITING_APPROVAL:
        return Score(CaseOutcome.ERROR, "the run waits for an approval")
    if run.status != RunStatus.SUCCEEDED:
        detail = f": {run.error}" if run.error else ""
        return Score(CaseOutcome.FAILED, f"the run ended {run.status}{detail}"[:MAX_NOTE])
    text = answer_text(run)
    if expectation.kind == "judge":
        verdict = judge_answer(
            evaluation.dataset,
            rubric=expectation.value,
            input=run.input,
            answer=text,
            run=run,
        )
        tokens = (verdict.usage.input_tokens, verdict.usage.output_tokens)
        if verdict.refused:  # a quota used up: the case fails with its message, unjudged
            return Score(CaseOutcome.FAILED, verdict.reason, *tokens, judged=False)
        if verdict.passed is None:
            return Score(CaseOutcome.ERROR, verdict.reason, *tokens)
        outcome = CaseOutcome.PASSED if verdict.passed else CaseOutcome.FAILED
        return Score(outcome, verdict.reason, *tokens)
    problem = expectation.failure(_answer_value(run, expectation.kind), None)
    if problem is not None and expectation.kind == "exact":
        problem = expectation.failure(text, None) and problem  # the text itself may match
    if problem is None:
        return Score(CaseOutcome.PASSED, "")
    return Score(CaseOutcome.FAILED, problem[:MAX_NOTE])


def answer_text(run: Run) -> str:
    if run.output or run.structured_output is None:
        return run.output
    return json.dumps(run.structured_output, ensure_ascii=False)


def _answer_value(run: Run, kind: str) -> Any:
    """The answer as an expectation reads it: a structured output as itself; for exact and
    schema, a text that is JSON as its value."""
    if run.structured_output is not None:
        return run.structured_output
    if kind in ("exact", "schema"):
        try:
            return json.loads(run.output)
        except ValueError:
            return run.output
    return run.output


def _score(evaluation: Evaluation, result: EvaluationResult, run: Run) -> None:
    try:
        score = score_answer(evaluation, result.expect, run)
    except ExpectationError as exc:  # a result copied before a rule changed
        score = Score(CaseOutcome.ERROR, f"the expectation cannot be used: {exc}")
    if not _store(result, score.outcome, score.reason, run, score):
        return  # another process scored it first
    if run.status == RunStatus.SUCCEEDED and score.outcome != CaseOutcome.ERROR and score.judged:
        verdict = Verdict.VERIFIED if score.outcome == CaseOutcome.PASSED else Verdict.REFUTED
        try:
            record_verdict(
                run,
                verdict=verdict,
                source=VerificationSource.EVALUATION,
                label=f"evaluation {evaluation.pk} ({evaluation.dataset.name})",
                note=score.reason[:MAX_NOTE],
            )
        except ValidationError:
            logger.warning("evaluation %s: run %s took no verdict", evaluation.pk, run.pk)


def _store(result, outcome, reason, run, score: Score | None = None) -> bool:
    fields: dict[str, Any] = {
        "outcome": outcome,
        "reason": reason[:MAX_NOTE],
        "score": {CaseOutcome.PASSED: 1.0, CaseOutcome.FAILED: 0.0}.get(outcome),
        "scored_at": timezone.now(),
    }
    if run is not None:
        fields["output"] = answer_text(run)[: MAX_TEXT * 10]
    if score is not None:
        fields["judge_input_tokens"] = score.judge_input_tokens
        fields["judge_output_tokens"] = score.judge_output_tokens
    done = EvaluationResult.objects.filter(pk=result.pk, outcome=CaseOutcome.RUNNING)
    return bool(done.update(**fields))


def _total(evaluation: Evaluation) -> Evaluation:
    """The totals from the results; completed once no case is pending or running."""
    counts = evaluation.results.aggregate(
        passed=Count("id", filter=Q(outcome=CaseOutcome.PASSED)),
        failed=Count("id", filter=Q(outcome=CaseOutcome.FAILED)),
        errors=Count("id", filter=Q(outcome=CaseOutcome.ERROR)),
        open=Count("id", filter=Q(outcome__in=[CaseOutcome.PENDING, CaseOutcome.RUNNING])),
        judge_in=Sum("judge_input_tokens"),
        judge_out=Sum("judge_output_tokens"),
    )
    fields: dict[str, Any] = {
        "passed": counts["passed"],
        "failed": counts["failed"],
        "errors": counts["errors"],
        "judge_input_tokens": counts["judge_in"] or 0,
        "judge_output_tokens": counts["judge_out"] or 0,
        "updated_at": timezone.now(),
    }
    Evaluation.objects.filter(pk=evaluation.pk).update(**fields)
    if counts["open"] == 0:
        Evaluation.objects.filter(pk=evaluation.pk, status=EvaluationStatus.RUNNING).update(
            status=EvaluationStatus.COMPLETED, finished_at=timezone.now()
        )
    evaluation.refresh_from_db()
    if evaluation.draft_id is not None and evaluation.status != EvaluationStatus.RUNNING:
        evaluation_ended.send(sender=Evaluation, evaluation=evaluation)  # its draft decided
    return evaluation


# -- comparison -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ComparedCase:
    position: int
    name: str
    input: str
    left: EvaluationResult | None
    right: EvaluationResult | None

    @property
    def changed(self) -> bool:
        def outcome(result):
            return result.outcome if result is not None else None

        return outcome(self.left) != outcome(self.right)


def evaluation_compare(left: Evaluation, right: Evaluation) -> list[ComparedCase]:
    """Two evaluations of the same dataset, case by case (cases matched by the case, else
    by position). ValidationError when their datasets differ. Two queries."""
    if left.dataset_id != right.dataset_id:
        raise ValidationError("Compare two evaluations of the same dataset.")

    def key(result: EvaluationResult) -> tuple:
        return ("case", result.case_id) if result.case_id else ("position", result.position)

    lefts = {key(r): r for r in left.results.select_related("run", "case")}
    rights = {key(r): r for r in right.results.select_related("run", "case")}
    rows = []
    for k in list(lefts) + [k for k in rights if k not in lefts]:
        a, b = lefts.get(k), rights.get(k)
        shown = a or b
        rows.append(ComparedCase(shown.position, _case_name(shown), shown.input, a, b))
    return sorted(rows, key=lambda row: (row.left is None, row.position))


def _case_name(result: EvaluationResult) -> str:
    return result.case.name if result.case_id and result.case else ""


# -- feedback -------------------------------------------------------------------------------
def feedback_record(
    *, tenant: Tenant, run: Run, by: AbstractBaseUser | ApiKey, rating: str, note: str = ""
) -> Feedback:
    """A thumbs up or down on a finished run, by its starter or an admin (as verifying):
    one per run and person, replaced by the next. 404 for another tenant's run."""
    if run.tenant_id != tenant.pk:
        raise Http404("No such run.")
    principal = Principal.for_initiator(tenant, by)
    principal.require(Action.VERIFY_RUN)
    if not (principal.is_admin or access.started(principal, run)):
        raise PermissionDenied("Only the run's starter or an admin can rate it.")
    if rating not in Rating.values:
        raise ValidationError({"rating": f"Choose one of: {', '.join(Rating.values)}."})
    note = _text(note, "note", limit=MAX_NOTE_FEEDBACK)
    if run.status in UNFINISHED:
        raise ValidationError({"run": "Rate a run once it has finished."})
    user = by if isinstance(by, AbstractBaseUser) else None
    key = by if isinstance(by, ApiKey) else None
    who = {"user": user} if user is not None else {"api_key": key}
    values = {"rating": rating, "note": note, "by_label": principal.label[:200]}
    try:
        with transaction.atomic():
            feedback, _ = Feedback.objects.update_or_create(
                tenant=tenant, run=run, **who, defaults=values
            )
    except IntegrityError:  # the same person, concurrently
        feedback = Feedback.objects.get(run=run, **who)
        for name, value in values.items():
            setattr(feedback, name, value)
        feedback.save()
    return feedback


def case_from_run(
    *,
    tenant: Tenant,
    run: Run,
    dataset: Dataset,
    by: AbstractBaseUser | ApiKey,
    match: str = "contains",
) -> Case:
    """The exchange (the run's input, and its answer as an `exact` or `contains`
    expectation, editable later) as a new case of `dataset`. The run's starter or an admin,
    on a succeeded run. 404 for another tenant's run or dataset."""
    if run.tenant_id != tenant.pk or dataset.tenant_id != tenant.pk:
        raise Http404("No such run or dataset.")
    principal = Principal.for_initiator(tenant, by)
    principal.require(Action.WRITE_DATA)
    if not (principal.is_admin or access.started(principal, run)):
        raise PermissionDenied("Only the run's starter or an admin can add it to a dataset.")
    if match not in ("exact", "contains"):
        raise ValidationError({"match": "Choose one of: exact, contains."})
    if run.status != RunStatus.SUCCEEDED:
        raise ValidationError({"run": "Only a succeeded run's answer can become a case."})
    if match == "exact" and run.structured_output is not None and not run.output:
        expect: dict[str, Any] = {"exact": run.structured_output}
    else:
        text = answer_text(run)
        if not text.strip():
            raise ValidationError({"run": "This run gave no answer to expect."})
        expect = {match: text if match == "exact" else text[:MAX_TEXT]}
    changes = {"input": run.input, "expect": expect, "source_run": run, "name": ""}
    return case_save(tenant=tenant, dataset=dataset, changes=changes)


def feedback_of(run_ids: list[int], user) -> dict[int, Feedback]:
    """The user's feedback on each of these runs (one query)."""
    rows = Feedback.objects.filter(run_id__in=run_ids, user=user)
    return {row.run_id: row for row in rows}
