"""Who sees which runs and approvals in the activity pages.

Owners and admins see every run of the tenant; members and viewers see the runs they
started themselves (`initiated_by_user`). Child runs (crew members, delegations) carry
their root run's initiator, so a member sees the whole tree of a run they started. Runs
started with an API key belong to no user: only owners and admins see them. Approvals
follow their run. Another tenant's id, or a run the user may not see, answers 404.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest

from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.models import Role
from agents.models import Approval, Run


def sees_whole_tenant(request: HttpRequest) -> bool:
    return request.membership.has_role(Role.ADMIN)


def visible_runs(request: HttpRequest) -> QuerySet[Run]:
    """The tenant's runs (top-level and children) this user may see."""
    runs = Run.objects.filter(tenant=request.tenant)
    if not sees_whole_tenant(request):
        runs = runs.filter(initiated_by_user=request.user)
    return runs


def visible_run(request: HttpRequest, run_id: int) -> Run:
    runs = visible_runs(request).select_related(
        "agent", "crew", "parent", "initiated_by_user", "initiated_by_api_key"
    )
    return get_for_tenant(runs, request.tenant, pk=run_id)


def visible_approvals(request: HttpRequest) -> QuerySet[Approval]:
    approvals = Approval.objects.filter(tenant=request.tenant)
    if not sees_whole_tenant(request):
        approvals = approvals.filter(run__initiated_by_user=request.user)
    return approvals


def visible_approval(request: HttpRequest, approval_id: int) -> Approval:
    approvals = visible_approvals(request).select_related("run", "run__agent", "run__crew")
    return get_for_tenant(approvals, request.tenant, pk=approval_id)


def may_decide(request: HttpRequest) -> bool:
    """Members and above decide approvals of the runs they see; viewers only look."""
    return request.membership.has_role(Role.MEMBER)
