"""The per-object rules of the access policy (`tenancy.policy`), for agents,
crews, workflows, runs and approvals. The services and every entry point ask these; nothing
else decides who may start, see, cancel or decide what.

- Start: any principal that may `START_RUN` may run any workflow of the tenant (a key
  limited to agents: those it names among them) whose agent steps' agents it may use, and
  any active agent or crew of the
  tenant, unless django-guardian object permissions restrict it: an agent (crew) on which
  any user or group holds `agents.use_agent` (`agents.use_crew`) is usable only by those
  holders and by admins. A crew also needs the use of each of its members (and its
  manager). A key limited to agents (`ApiKey.allowed_agents`) runs only those.
- See: admins (and keys made by one, unless limited to agents) see every run; anyone
  else the runs they started (child runs — crew members, delegations — carry their root
  run's initiator) and, as a member of an agent's approval group, that agent's runs.
  Approvals follow their run.
- Cancel: the run's starter, or an admin.
- Decide an approval: per agent (`Agent.approval_deciders`): the run's starter and
  admins (default), admins only, or a group's members and admins; with
  `approval_not_starter`, never the run's starter. Direct tool calls follow the default.
"""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from guardian.models import GroupObjectPermission, UserObjectPermission
from guardian.shortcuts import get_objects_for_user

from agents.models import (
    Agent,
    Approval,
    ApprovalDeciders,
    Crew,
    CrewMember,
    Run,
    WorkflowDefinition,
)
from agents.workflows import definition_references
from tenancy.access import get_for_tenant
from tenancy.models import TenantGroup
from tenancy.policy import Action, Principal

USE_PERMISSIONS = {Agent: "use_agent", Crew: "use_crew"}


# -- starting runs --------------------------------------------------------------------
def usable(model: type[Agent] | type[Crew], principal: Principal) -> QuerySet:
    """The tenant's active agents (or crews) the principal may start (for a crew: the crew
    grant only; `may_start` checks its members too). Three queries at most: the
    candidates, the restricted ones, and those the user holds the permission on."""
    if not principal.may(Action.START_RUN):
        return model.objects.none()
    return _granted(model, principal)


def _granted(
    model: type[Agent] | type[Crew],
    principal: Principal,
    *,
    pks: set[int] | None = None,
    members: bool = False,
) -> QuerySet:
    """The agents (crews) whose use grants and key limits let the principal in: active
    ones, among `pks` if given. A crew's `members` are checked for their grants only (an
    inactive member still runs; a key's agent limit names the crew, not its members)."""
    candidates = model.objects.filter(tenant=principal.tenant)
    if pks is not None:
        candidates = candidates.filter(pk__in=pks)
    if not members:
        candidates = candidates.filter(active=True)
        limit = principal.limited_to_agents()
        if limit is not None:
            candidates = candidates.filter(slug__in=limit)
    if principal.has_role("admin"):  # admins, and keys made by one, pass use grants
        return candidates
    codename = USE_PERMISSIONS[model]
    restricted = _restricted_ids(model, codename, candidates)
    if not restricted:
        return candidates
    if principal.user is None:
        return candidates.exclude(pk__in=restricted)
    held = get_objects_for_user(
        principal.user,
        f"agents.{codename}",
        klass=candidates.filter(pk__in=restricted),
        accept_global_perms=False,
    ).values_list("pk", flat=True)
    return candidates.exclude(pk__in=set(restricted) - set(held))


def may_start(principal: Principal, target: Agent | Crew) -> bool:
    """May the principal run `target`? For a crew: the crew and each of its agents."""
    return principal.may(Action.START_RUN) and may_use(principal, target)


def may_use(principal: Principal, target: Agent | Crew) -> bool:
    """Do `target`'s use grants (and, for a crew, its agents') and a key's limits let the
    principal in? `may_start` also asks for the START_RUN action; a conversation with
    `target` needs only this. A few queries, about `target` alone; none for an agent and an
    admin (or a key made by one): the agent in hand answers, as it was just read."""
    if isinstance(target, Agent) and principal.has_role("admin"):
        limit = principal.limited_to_agents()
        return (
            target.tenant_id == principal.tenant.pk
            and target.active
            and (limit is None or target.slug in limit)
        )
    if not _granted(type(target), principal, pks={target.pk}).exists():
        return False
    if isinstance(target, Crew):
        agent_ids = set(
            CrewMember.objects.filter(crew=target).values_list("agent_id", flat=True)
        ) | ({target.manager_id} if target.manager_id else set())
        granted = _granted(Agent, principal, pks=agent_ids, members=True)
        if agent_ids - set(granted.values_list("pk", flat=True)):
            return False
    return True


def may_start_workflow(principal: Principal, workflow: WorkflowDefinition) -> bool:
    """May the principal run one of the tenant's workflows? Whoever may start runs, but a
    key limited to agents runs only the workflows it names among them; and only with the
    use of each agent the workflow's agent steps name (`may_use_workflow_agents`)."""
    if not principal.may(Action.START_RUN) or workflow.tenant_id != principal.tenant.pk:
        return False
    limit = principal.limited_to_agents()
    if limit is not None and workflow.slug not in limit:
        return False
    return may_use_workflow_agents(principal, workflow)


def may_use_workflow_agents(principal: Principal, workflow: WorkflowDefinition) -> bool:
    """Do the use grants of each agent the workflow's agent steps name let the principal in,
    as a crew's members' do (a key's agent limit names the workflow, not its agents)? So a
    workflow is no way round an agent's restriction, whether started or called by an
    agent as a tool. No query for a workflow without agent steps or for an admin; a few
    otherwise."""
    slugs = definition_references(workflow.definition).agents
    if not slugs or principal.has_role("admin"):
        return True
    agents = Agent.objects.filter(tenant=principal.tenant, slug__in=slugs)
    ids = set(agents.values_list("pk", flat=True))
    granted = _granted(Agent, principal, pks=ids, members=True)
    return not ids - set(granted.values_list("pk", flat=True))


def require_start(principal: Principal, target: Agent | Crew) -> None:
    principal.require(Action.START_RUN)
    if not may_start(principal, target):
        what = "agent" if isinstance(target, Agent) else "crew"
        raise PermissionDenied(f"You may not use this {what}.")


def _restricted_ids(model, codename: str, candidates: models.QuerySet) -> set[int]:
    """Ids among `candidates` on which any user or group holds the permission."""
    content_type = ContentType.objects.get_for_model(model)
    ids = {str(pk) for pk in candidates.values_list("pk", flat=True)}
    found: set[int] = set()
    for permission_model in (UserObjectPermission, GroupObjectPermission):
        found.update(
            int(pk)
            for pk in permission_model.objects.filter(
                content_type=content_type, permission__codename=codename, object_pk__in=ids
            ).values_list("object_pk", flat=True)
        )
    return found


# -- seeing and cancelling runs ---------------------------------------------------------
def visible_runs(principal: Principal) -> QuerySet[Run]:
    """The tenant's runs (top-level and children) the principal may see; none without
    `READ_RUN`."""
    runs = Run.objects.filter(tenant=principal.tenant)
    if not principal.may(Action.READ_RUN):
        return runs.none()
    if principal.is_admin:
        return runs
    if principal.api_key is not None:
        return runs.filter(initiated_by_api_key=principal.api_key)
    # A subquery, not a join through the group's members (a run once, however many).
    groups = TenantGroup.objects.filter(tenant=principal.tenant, group__user=principal.user)
    approver = models.Q(agent__approval_deciders=ApprovalDeciders.GROUP) & (
        models.Q(agent__approval_group__in=groups)
    )
    manager = models.Q(agent=None, crew__manager__approval_deciders=ApprovalDeciders.GROUP)
    manager &= models.Q(crew__manager__approval_group__in=groups)
    return runs.filter(models.Q(initiated_by_user=principal.user) | approver | manager)


def visible_run(principal: Principal, run_id) -> Run:
    """The run if the principal may see it; 404 otherwise (also for other tenants)."""
    runs = visible_runs(principal).select_related(
        "agent", "crew", "workflow", "parent", "initiated_by_user", "initiated_by_api_key"
    )
    return get_for_tenant(runs, principal.tenant, pk=_int(run_id))


def started(principal: Principal, run: Run) -> bool:
    return principal.is_initiator_of(run.initiated_by_user_id, run.initiated_by_api_key_id)


def require_cancel(principal: Principal, run: Run) -> None:
    principal.require(Action.CANCEL_RUN)
    if not (principal.is_admin or started(principal, run)):
        raise PermissionDenied("Only the run's starter or an admin can stop it.")


def may_resume(principal: Principal, run: Run) -> bool:
    """Whether the principal may resume the run once it failed (agents.runs.resume): its
    starter or an admin, who may still use its agent (or crew, and the crew's agents; a
    workflow: anyone who may start runs, as starting it). A few queries for a non-admin, and
    for a crew."""
    if not principal.may(Action.RESUME_RUN):
        return False
    if not (principal.is_admin or started(principal, run)):
        return False
    if run.workflow_id is not None:
        return run.workflow is not None and may_start_workflow(principal, run.workflow)
    target = run.agent or run.crew
    return target is not None and may_use(principal, target)


def require_resume(principal: Principal, run: Run) -> None:
    principal.require(Action.RESUME_RUN)
    if not may_resume(principal, run):
        raise PermissionDenied(
            "Only the run's starter or an admin, allowed to use its agent or crew, can resume it."
        )


def may_verify(principal: Principal, run: Run) -> bool:
    """Whether the principal may give a verdict on the run's outcome (agents.verification)."""
    if not principal.may(Action.VERIFY_RUN):
        return False
    return principal.is_admin or started(principal, run)


def require_verify(principal: Principal, run: Run) -> None:
    principal.require(Action.VERIFY_RUN)
    if not may_verify(principal, run):
        raise PermissionDenied("Only the run's starter or an admin can verify its outcome.")


# -- approvals --------------------------------------------------------------------------
def visible_approvals(principal: Principal) -> QuerySet[Approval]:
    """Approvals of the runs the principal sees."""
    approvals = Approval.objects.filter(tenant=principal.tenant)
    if not principal.may(Action.READ_RUN):
        return approvals.none()
    if principal.is_admin:
        return approvals
    return approvals.filter(run__in=visible_runs(principal))


def visible_approval(principal: Principal, approval_id) -> Approval:
    approvals = visible_approvals(principal).select_related("run", "run__agent", "run__crew")
    return get_for_tenant(approvals, principal.tenant, pk=_int(approval_id))


def decide_refusal(principal: Principal, approval: Approval) -> str | None:
    """Why the principal may not decide `approval`, or None if they may."""
    if not principal.may(Action.DECIDE_APPROVAL):
        return "Deciding approvals needs the member role (or the 'run' scope)."
    run = approval.run
    agent = deciding_agent(run)
    deciders = agent.approval_deciders if agent is not None else ApprovalDeciders.STARTER
    is_starter = started(principal, run)
    if agent is not None and agent.approval_not_starter and is_starter:
        return "Someone other than the run's starter must decide this call."
    if principal.is_admin:
        return None
    if deciders == ApprovalDeciders.STARTER and is_starter:
        return None
    if deciders == ApprovalDeciders.GROUP and principal.user is not None and agent is not None:
        group = agent.approval_group
        if group is not None and group.group.user_set.filter(pk=principal.user.pk).exists():
            return None
    return {
        ApprovalDeciders.ADMINS: "Only an admin can decide this agent's calls.",
        ApprovalDeciders.GROUP: "Only the agent's approval group can decide this call.",
    }.get(deciders, "Only the run's starter or an admin can decide this call.")


def deciding_agent(run: Run) -> Agent | None:
    """The agent whose approval authority governs the run's calls: its own, or for a
    hierarchical crew's run (the manager thinks in it) the crew's manager; None for a
    direct tool call."""
    if run.agent_id is not None:
        return run.agent
    crew = run.crew if run.crew_id is not None else None
    return crew.manager if crew is not None and crew.manager_id is not None else None


def may_decide(principal: Principal, approval: Approval) -> bool:
    return decide_refusal(principal, approval) is None


def require_decide(principal: Principal, approval: Approval) -> None:
    refusal = decide_refusal(principal, approval)
    if refusal is not None:
        raise PermissionDenied(refusal)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id
