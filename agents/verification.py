"""Outcome claims and their verification.

A succeeded run records an **outcome claim** (`Run.claim`, written with its outcome by
finalize): what the agent says it did or answered, and its evidence — the tool results it
used (agents/runtime/claims.py). Whether the claim holds is a separate record, a
**Verification**: by a person (the run's starter or an admin, on the run page, in the chat,
over REST), by the agent's verifying tool (`Agent.verifier_tool`, called by a task once the
run succeeded, as a direct call of the run's initiator), or by an evaluation. So
"succeeded" never means "fulfilled": a run's current verdict is its latest verification,
none until someone or something checks.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.http import Http404

from agents import access
from agents.models import Run, Verdict, Verification, VerificationSource
from agents.runs import tool_run
from agents.runtime.spec import RunStatus
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Principal

MAX_NOTE = 2000
UNATTENDED = (
    "not run: this verifying tool needs approval, and a verification runs when the run has "
    "ended, with nobody to approve it; choose a verifying tool that needs none"
)
logger = logging.getLogger(__name__)


def verify(
    *, tenant: Tenant, run: Run, verdict: str, by: AbstractBaseUser | ApiKey, note: str = ""
) -> Verification:
    """A person's verdict on the run's outcome claim. 404 for another tenant's run;
    PermissionDenied unless `by` started the run or is an admin; ValidationError for a run
    without a claim (not succeeded), an unknown verdict or a note too long."""
    if run.tenant_id != tenant.pk:
        raise Http404("No such run.")
    principal = Principal.for_initiator(tenant, by)
    access.require_verify(principal, run)
    return _record(
        run,
        verdict=verdict,
        source=VerificationSource.PERSON,
        label=principal.label,
        note=note,
        user=by if isinstance(by, AbstractBaseUser) else None,
    )


def record_verdict(run: Run, *, verdict: str, source: str, label: str, note: str = ""):
    """A verifying tool's or an evaluation's verdict (checked as a person's is)."""
    return _record(run, verdict=verdict, source=source, label=label, note=note)


def _record(run, *, verdict, source, label, note, user=None) -> Verification:
    if run.status != RunStatus.SUCCEEDED or run.claim is None:
        raise ValidationError(
            f"Only a succeeded run's outcome can be verified; this run is {run.status}."
        )
    if verdict not in Verdict.values:
        raise ValidationError({"verdict": f"Choose one of: {', '.join(Verdict.values)}."})
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise ValidationError({"note": f"A note is text of at most {MAX_NOTE} characters."})
    if "\x00" in note:
        raise ValidationError({"note": "A note cannot contain NUL characters."})
    return Verification.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        verdict=verdict,
        source=source,
        by_user=user,
        by_label=label[:200],
        note=note,
    )


def latest_verdict(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` annotated with `verdict`: their latest verification's, or None."""
    latest = Verification.objects.filter(run=OuterRef("pk")).order_by("-id")
    return runs.annotate(verdict=Subquery(latest.values("verdict")[:1]))


def rates_by_agent(runs: QuerySet[Run]) -> list[dict[str, Any]]:
    """Per agent, among `runs` that succeeded: how many, how many verified and refuted (by
    their latest verdict), and those as shares of the succeeded. One query."""
    succeeded = runs.filter(status=RunStatus.SUCCEEDED, agent__isnull=False)
    rows = (
        latest_verdict(succeeded)
        .values("agent__slug", "agent__name")
        .annotate(
            succeeded=Count("id"),
            verified=Count("id", filter=Q(verdict=Verdict.VERIFIED)),
            refuted=Count("id", filter=Q(verdict=Verdict.REFUTED)),
        )
        .order_by("agent__name")
    )
    return [
        {
            "agent": row["agent__slug"],
            "name": row["agent__name"],
            "succeeded": row["succeeded"],
            "verified": row["verified"],
            "refuted": row["refuted"],
            "verified_rate": row["verified"] / row["succeeded"],
            "refuted_rate": row["refuted"] / row["succeeded"],
        }
        for row in rows
    ]


def verify_with_tool(run: Run) -> Verification | None:
    """Ask the run's agent's verifying tool about its claim: it gets {"claim", "input",
    "evidence"} and answers {"verified": true|false, "note": "..."}; its verdict is recorded
    (source `tool`). The call is a direct call (`tool_run`, via `verifier`): the tool-call
    step's approval rule (nobody can approve: a tool that needs it is refused), rate limit and
    quotas, recorded as a run. A missing tool, a caller who may not run it, a tool error or
    an answer of another shape records no verdict and is logged: no verdict is better than a
    guessed one. Reads the run's tenant and initiator (select_related them)."""
    agent = run.agent
    name = agent.verifier_tool if agent is not None else ""
    if not name or run.claim is None or run.status != RunStatus.SUCCEEDED:
        return None
    key = run.initiated_by_api_key
    # A revoked or orphaned key acts no more. (Asking reads its creator's standing: one query
    # here, so that tool_run's check of the key needs none on its event loop.)
    if key is not None and not key.is_usable:
        logger.warning("run %s: its key is no longer usable; no verification", run.pk)
        return None
    arguments = {"claim": run.claim["text"], "input": run.input, "evidence": run.claim["evidence"]}
    try:
        # As the run's initiator (none: the platform): their quotas, never beyond what they may.
        result = tool_run(
            tenant=run.tenant, name=name, arguments=arguments, via="verifier",
            user=run.initiated_by_user, api_key=key, unattended=UNATTENDED,
        )  # fmt: skip
    except (Http404, PermissionDenied) as exc:
        logger.warning("run %s: verifying tool %s not run: %s", run.pk, name, exc)
        return None
    answer = result.result
    if result.error is not None or not isinstance(answer, dict):
        logger.warning("run %s: verifying tool %s gave no verdict: %s", run.pk, name, result.error)
        return None
    verified, note = answer.get("verified"), answer.get("note", "")
    if not isinstance(verified, bool) or not isinstance(note, str):
        logger.warning("run %s: verifying tool %s answered another shape", run.pk, name)
        return None
    verdict = Verdict.VERIFIED if verified else Verdict.REFUTED
    return record_verdict(
        run, verdict=verdict, source=VerificationSource.TOOL, label=name, note=note[:MAX_NOTE]
    )
