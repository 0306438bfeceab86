"""Which runs and approvals the activity pages show: the access policy's answer
(`agents.access`) for the signed-in user. Owners and admins see every run of the tenant;
members and viewers the runs they started (with their child runs) and, as members of an
agent's approval group, that agent's runs. Runs started with an API key belong to no user:
only owners and admins see them. Another tenant's id, or a run the user may not see,
answers 404.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest

from agents import access
from agents.models import Approval, Run


def sees_whole_tenant(request: HttpRequest) -> bool:
    return request.principal.is_admin


def visible_runs(request: HttpRequest) -> QuerySet[Run]:
    return access.visible_runs(request.principal)


def visible_run(request: HttpRequest, run_id: int) -> Run:
    return access.visible_run(request.principal, run_id)


def visible_approvals(request: HttpRequest) -> QuerySet[Approval]:
    return access.visible_approvals(request.principal)


def visible_approval(request: HttpRequest, approval_id: int) -> Approval:
    return access.visible_approval(request.principal, approval_id)


def with_authority(request: HttpRequest, approval: Approval) -> Approval:
    """The approval, marked with whether the user may decide it (`may_decide`) and why not
    (`decide_refusal`), for its card."""
    approval.decide_refusal = access.decide_refusal(request.principal, approval) or ""
    approval.may_decide = not approval.decide_refusal
    return approval
