"""The agents app's reads: agents, crews, conversations, runs, approvals and facts found
for a tenant, and what the faces list of them. Services (agents/services.py,
agents/runs) write; these only read. Every face (REST, /v1, MCP, web) asks here rather
than querying the ORM itself.

Each selector takes the tenant (or a Principal, whose tenant it is) and never returns
another tenant's rows; one asked for by id answers 404 (Http404), never 403.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.fields.json import KT
from django.db.models.functions import TruncDate
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import Http404
from guardian.shortcuts import get_groups_with_perms, get_users_with_perms

from agents import access
from agents.evaluations import visible_evaluations
from agents.models import (
    TOOL_ERROR_EVENT,
    Agent,
    Approval,
    ApprovalStatus,
    Case,
    Conversation,
    ConversationSummary,
    Crew,
    CrewMember,
    Dataset,
    Evaluation,
    Fact,
    Feedback,
    Message,
    Quota,
    Run,
    RunEvent,
    WorkflowDefinition,
)
from base.versions import config_changed, per_config_version
from tenancy.access import filter_given, get_for_tenant
from tenancy.models import ApiKey, Membership, Tenant, TenantGroup
from tenancy.policy import Principal


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- one object by id or slug ----------------------------------------------------------
def run_get(*, tenant: Tenant, run_id: Any) -> Run:
    return get_for_tenant(Run.objects.select_related("agent"), tenant, pk=_int(run_id))


def conversation_get(*, tenant: Tenant, conversation_id: Any) -> Conversation:
    return get_for_tenant(Conversation, tenant, pk=_int(conversation_id))


def approval_get(*, tenant: Tenant, approval_id: Any) -> Approval:
    return get_for_tenant(Approval.objects.select_related("run"), tenant, pk=_int(approval_id))


def fact_get(*, tenant: Tenant, fact_id: Any) -> Fact:
    return get_for_tenant(Fact, tenant, pk=_int(fact_id))


def agent_get(*, tenant: Tenant, slug: str) -> Agent:
    return get_for_tenant(Agent, tenant, slug=slug, active=True)


def crew_get(*, tenant: Tenant, slug: str) -> Crew:
    return get_for_tenant(Crew, tenant, slug=slug, active=True)


def model_target(*, tenant: Tenant, slug: str) -> Agent | Crew:
    """What a model name means to the OpenAI-compatible face and MCP's `ask_*`: the active
    agent `slug`, else the active crew `slug`; Http404 if neither. A copy of what this
    process remembers per tenant configuration version (any agent, crew or connection
    change moves it): the lookup was 3 ms of a chat's first token (bench/api.py)."""

    found = per_config_version(_targets, tenant.pk, dict)
    target = found.get(slug)
    if target is None:  # (misses are not kept: any name may be asked for)
        agents = Agent.objects.filter(tenant=tenant, slug=slug, active=True)
        target = agents.select_related("provider_connection").first()
        target = target or Crew.objects.filter(tenant=tenant, slug=slug, active=True).first()
        if target is None:
            raise Http404(f"No active agent or crew {slug!r}.")
        found[slug] = target
    return copy.copy(target)  # (its own state: a caller may cache relations on it)


_targets: dict[int, tuple[str, dict[str, Agent | Crew]]] = {}


@receiver([post_save, post_delete], sender=Agent)
@receiver([post_save, post_delete], sender=Crew)
def _target_changed(sender, instance: Agent | Crew, **kwargs) -> None:
    config_changed(instance.tenant_id)


def active_agents_and_crews(
    *, tenant_id: int, slugs: list[str] | None = None
) -> list[Agent | Crew]:
    """The tenant's active agents, then its active crews, each by slug; only `slugs` when
    given (a key limited to agents). Two queries."""
    agents = Agent.objects.filter(tenant_id=tenant_id, active=True).order_by("slug")
    crews = Crew.objects.filter(tenant_id=tenant_id, active=True).order_by("slug")
    if slugs is not None:
        agents, crews = agents.filter(slug__in=slugs), crews.filter(slug__in=slugs)
    return [*agents, *crews]


# -- crews and use grants (configuration versions) ---------------------------------------
def crew_member_slugs(crew: Crew) -> list[str]:
    """The crew's members in order, by slug (its versions keep them so). One query."""
    return list(CrewMember.objects.filter(crew=crew).values_list("agent__slug", flat=True))


def crew_members_named(tenant: Tenant, slugs: list[str]) -> list[Agent]:
    """The tenant's agents with these slugs, in this order; ValidationError naming those
    that no longer exist (restoring a crew's version)."""
    found = {a.slug: a for a in Agent.objects.filter(tenant=tenant, slug__in=slugs)}
    if missing := [slug for slug in slugs if slug not in found]:
        raise ValidationError(
            f"This version's members include agents that no longer exist: {', '.join(missing)}."
        )
    return [found[slug] for slug in slugs]


def use_grants(*, tenant: Tenant, target: Agent | Crew) -> tuple[list, list[TenantGroup]]:
    """The users and the tenant groups holding the use of `target` (none: open to every
    member)."""
    if target.tenant_id != tenant.pk:
        raise Http404("No such agent or crew.")  # other tenants' objects: 404
    codename = access.USE_PERMISSIONS[type(target)]
    users = get_users_with_perms(target, only_with_perms_in=[codename], with_group_users=False)
    groups = get_groups_with_perms(target, attach_perms=True)
    holding = [group for group, perms in groups.items() if codename in perms]
    tenant_groups = TenantGroup.objects.filter(tenant=tenant, group__in=holding)
    return sorted(users, key=lambda u: u.get_username()), list(tenant_groups)


def use_grant_holders(tenant: Tenant, lines: list[str]) -> list[AbstractBaseUser | TenantGroup]:
    """The members and groups a version's grant lines name ("user bob: use_agent", "group
    Finance: use_crew"; other permissions are not use grants and are left out), for
    restoring it; ValidationError naming those no longer there."""
    holders: list[AbstractBaseUser | TenantGroup] = []
    missing = []
    for line in lines:
        kind, _, rest = str(line).partition(" ")
        name, _, codename = rest.rpartition(": ")
        if codename not in access.USE_PERMISSIONS.values():
            continue
        if kind == "group":
            found = TenantGroup.objects.filter(tenant=tenant, name=name).first()
        else:
            membership = Membership.objects.filter(tenant=tenant, user__username=name).first()
            found = membership.user if membership else None
        if found is None:
            missing.append(f"{kind} {name}")
        else:
            holders.append(found)
    if missing:
        raise ValidationError(
            f"This version grants the use to members or groups no longer here: "
            f"{', '.join(missing)}."
        )
    return holders


# -- configuration: agents and crews ----------------------------------------------------
def agents_of(*, tenant: Tenant, active: bool | None = None, kind: str | None = None) -> QuerySet:
    """The tenant's agents (active or not), only `active` ones or of `kind` when given."""
    return filter_given(Agent.objects.filter(tenant=tenant), active=active, kind=kind)


def agents_listed(
    *, tenant: Tenant, active: bool | None = None, kind: str | None = None
) -> QuerySet:
    """`agents_of` with each agent's skill pins: two queries more, not one per agent."""
    return agents_of(tenant=tenant, active=active, kind=kind).prefetch_related(
        "skill_pins__skill", "skill_pins__version"
    )


def agent_configured(*, tenant: Tenant, slug: str) -> Agent:
    """The tenant's agent `slug`, active or not (to show or change it); 404 otherwise."""
    return get_for_tenant(Agent, tenant, slug=slug)


def crews_of(*, tenant: Tenant, active: bool | None = None, mode: str | None = None) -> QuerySet:
    """The tenant's crews with their managers and members (two queries when listed)."""
    return filter_given(_crews_with_members().filter(tenant=tenant), active=active, mode=mode)


def crew_configured(*, tenant: Tenant, slug: str) -> Crew:
    """The tenant's crew `slug`, active or not (to change it); 404 otherwise. One query."""
    return get_for_tenant(Crew, tenant, slug=slug)


def crew_shown(*, tenant: Tenant, slug: str) -> Crew:
    """As crew_configured, with its manager and members (three queries)."""
    return get_for_tenant(_crews_with_members(), tenant, slug=slug)


def _crews_with_members() -> QuerySet:
    return Crew.objects.select_related("manager").prefetch_related("members__agent")


def agents_named(*, tenant: Tenant, slugs: list[str]) -> dict[str, Agent]:
    """The tenant's agents among `slugs`, by slug (those missing are left out). One query."""
    return {agent.slug: agent for agent in Agent.objects.filter(tenant=tenant, slug__in=slugs)}


# -- conversations ----------------------------------------------------------------------
def conversations_of(
    *,
    tenant: Tenant,
    owner: AbstractBaseUser | ApiKey,
    agent_slug: str | None = None,
    crew_slug: str | None = None,
) -> QuerySet:
    """The conversations `owner` (a user or an API key) holds in the tenant, with their
    agent and crew; with one agent's or crew's only when its slug is given."""
    owned = {"owner_api_key": owner} if isinstance(owner, ApiKey) else {"owner_user": owner}
    conversations = Conversation.objects.filter(tenant=tenant, **owned)
    conversations = conversations.select_related("agent", "crew")
    return filter_given(conversations, agent__slug=agent_slug, crew__slug=crew_slug)


def conversation_of(
    *, tenant: Tenant, owner: AbstractBaseUser | ApiKey, conversation_id: Any
) -> Conversation:
    """One of `owner`'s conversations; 404 for anyone else's or another tenant's."""
    conversations = conversations_of(tenant=tenant, owner=owner)
    return get_for_tenant(conversations, tenant, pk=_int(conversation_id))


def conversation_messages(*, tenant: Tenant, conversation: Conversation) -> QuerySet:
    """The conversation's messages (the caller paginates them)."""
    return Message.objects.filter(tenant=tenant, conversation=conversation)


def conversation_summaries(*, tenant: Tenant, conversation: Conversation) -> QuerySet:
    """The summaries of the conversation's older turns (compaction), oldest first (the
    caller paginates them)."""
    return ConversationSummary.objects.filter(tenant=tenant, conversation=conversation)


def agent_named(*, tenant: Tenant, slug: str) -> Agent | None:
    """The tenant's agent `slug` (active or not), or None: a field's choice, answered with a
    field error rather than a 404. One query."""
    return Agent.objects.filter(tenant=tenant, slug=slug).first()


def crew_named(*, tenant: Tenant, slug: str) -> Crew | None:
    """As agent_named, for a crew."""
    return Crew.objects.filter(tenant=tenant, slug=slug).first()


def workflow_named(*, tenant: Tenant, slug: str) -> WorkflowDefinition | None:
    """As agent_named, for a workflow."""
    return WorkflowDefinition.objects.filter(tenant=tenant, slug=slug).first()


# -- quotas ---------------------------------------------------------------------------------
def quotas_of(*, tenant: Tenant, scope: str | None = None, metric: str | None = None) -> QuerySet:
    """The tenant's quotas with whom each limits; only of `scope` or `metric` when given."""
    found = Quota.objects.filter(tenant=tenant).select_related("tenant", "user", "api_key", "agent")
    return filter_given(found, scope=scope, metric=metric)


def agent_usable(*, principal: Principal, slug: str) -> Agent:
    """The tenant's active agent `slug` if the principal may start it; 404 otherwise."""
    return get_for_tenant(access.usable(Agent, principal), principal.tenant, slug=slug)


# -- evaluations ------------------------------------------------------------------------------
def datasets_of(*, tenant: Tenant) -> QuerySet:
    """The tenant's datasets, each with its `case_count` (one query)."""
    return Dataset.objects.filter(tenant=tenant).annotate(case_count=Count("cases"))


def dataset_case_count(dataset: Dataset) -> int:
    """How many cases the dataset has: `case_count` when the list annotated it, else one
    query."""
    count = getattr(dataset, "case_count", None)
    return dataset.cases.count() if count is None else count


def dataset_cases(*, dataset: Dataset) -> QuerySet:
    """The dataset's cases in their order."""
    return dataset.cases.all()


def case_get(*, tenant: Tenant, dataset: Dataset, case_id: Any) -> Case:
    """One case of the dataset; 404 for another dataset's or tenant's."""
    return get_for_tenant(dataset.cases.all(), tenant, pk=_int(case_id))


# -- runs ---------------------------------------------------------------------------------------
def runs_visible(
    *,
    principal: Principal,
    status: str | None = None,
    agent_slug: str | None = None,
    crew_slug: str | None = None,
    conversation_id: int | None = None,
    parent_id: int | None = None,
) -> QuerySet:
    """The runs the principal may see (agents.access.visible_runs) with their details
    (runs_with_details), filtered by what is given. Four queries when listed."""
    return filter_given(
        runs_with_details(access.visible_runs(principal)),
        status=status,
        agent__slug=agent_slug,
        crew__slug=crew_slug,
        conversation_id=conversation_id,
        parent_id=parent_id,
    )


def run_shown(*, tenant: Tenant, run_id: Any) -> Run:
    """The tenant's run with what runs_visible adds (to show it afresh); 404 otherwise."""
    return get_for_tenant(runs_with_details(Run.objects.all()), tenant, pk=_int(run_id))


def runs_with_details(runs: QuerySet) -> QuerySet:
    """`runs` with their agent, crew or workflow, approvals (their children's too) and
    verifications: what the faces show of a run."""
    runs = runs.select_related("agent", "crew", "workflow")
    return runs.prefetch_related("approvals", "children__approvals", "verifications", "attachments")


def runs_since(*, principal: Principal, since: Any) -> QuerySet:
    """The runs the principal may see created since `since` (usage reports)."""
    return access.visible_runs(principal).filter(created_at__gte=since)


def run_approvals(run: Run) -> list[Approval]:
    """The run's approvals and its child runs' (a crew surfaces its members'), by id. No
    query when runs_visible or run_shown fetched the run."""
    approvals = list(run.approvals.all())
    for child in run.children.all():
        approvals.extend(child.approvals.all())
    return sorted(approvals, key=lambda approval: approval.pk)


def run_with_key(*, tenant: Tenant, idempotency_key: str) -> Run | None:
    """The tenant's run started with this Idempotency-Key, or None. One query."""
    return Run.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()


def run_is_visible(*, principal: Principal, run: Run) -> bool:
    """Whether the principal may see `run`. One query."""
    return access.visible_runs(principal).filter(pk=run.pk).exists()


def run_events_after(*, run: Run, after: int, limit: int) -> list[RunEvent]:
    """At most `limit` of the run's events after sequence number `after`, in order."""
    return list(RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])


# Not made with `store: false` (only that is stored: {"kept": false}): not found again.
_KEPT = Q(client_request__isnull=True) | ~Q(client_request__has_key="kept")


def stored_response_run(*, principal: Principal, run_id: int) -> Run | None:
    """The top-level agent run behind an OpenAI Responses id that the key may see and that
    was kept (stored), with its agent; else None. One query."""
    runs = access.visible_runs(principal).filter(
        pk=run_id, agent__isnull=False, parent__isnull=True
    )
    return runs.filter(_KEPT).select_related("agent").first()


def crew_members(crew: Crew) -> list[Agent]:
    """The crew's member agents in order; no query when crews_of or crew_configured
    fetched the crew."""
    return [member.agent for member in crew.members.all()]


# -- the chat's conversations, turns and streams ---------------------------------------------
def conversations_found(
    *, tenant: Tenant, owner: AbstractBaseUser | ApiKey, title_part: str = "", limit: int = 200
) -> QuerySet:
    """`owner`'s conversations, most recently active first, at most `limit`; only those
    whose title contains `title_part` (any case) when given."""
    conversations = conversations_of(tenant=tenant, owner=owner)
    if title_part:
        conversations = conversations.filter(title__icontains=title_part)
    return conversations.order_by("-updated_at")[:limit]


def conversation_run(*, tenant: Tenant, conversation: Conversation, run_id: Any) -> Run:
    """A top-level run of the conversation, with its agent and crew; 404 otherwise."""
    runs = Run.objects.select_related("agent", "crew")
    runs = runs.filter(tenant=tenant, conversation=conversation, parent=None, pk=_int(run_id))
    run = runs.first()
    if run is None:
        raise Http404("No such run.")
    return run


def conversation_approval(
    *, tenant: Tenant, conversation: Conversation, approval_id: Any
) -> Approval:
    """An approval of one of the conversation's runs or of their child runs (a crew's
    members), with its run; 404 otherwise."""
    runs = Run.objects.filter(tenant=tenant, conversation=conversation, parent=None)
    approval = (
        Approval.objects.select_related("run")
        .filter(tenant=tenant, pk=_int(approval_id))
        .filter(Q(run__in=runs) | Q(run__parent__in=runs))
        .first()
    )
    if approval is None:
        raise Http404("No such approval.")
    return approval


def conversation_messages_shown(*, conversation: Conversation) -> list[Message]:
    """The conversation's messages, oldest first, with their runs' agents, crews and
    verifications. Two queries."""
    messages = Message.objects.filter(conversation=conversation)
    messages = messages.select_related("run__agent", "run__crew")
    return list(messages.prefetch_related("run__verifications"))


def conversation_summaries_shown(*, conversation: Conversation) -> list[ConversationSummary]:
    """The summaries made of the conversation's older turns (compaction), oldest first.
    One query."""
    return list(
        ConversationSummary.objects.filter(conversation=conversation).only(
            "last_message_id", "text", "messages_covered", "tokens_covered", "created_at"
        )
    )


def conversation_summary_shown(
    *, tenant_id: int, conversation_id: int, summary_id: int
) -> ConversationSummary | None:
    """One summary of the conversation's older turns, as the thread shows it (a run's
    `conversation.compacted` event names it); None when it is not this conversation's.
    One query."""
    summaries = ConversationSummary.objects.filter(
        pk=summary_id, tenant_id=tenant_id, conversation_id=conversation_id
    )
    return summaries.only(
        "last_message_id", "text", "messages_covered", "tokens_covered", "created_at"
    ).first()


def run_events_shown(*, run_ids: list[int], finished_ids: list[int]) -> QuerySet:
    """The events of these runs in order, without the text deltas of finished runs (their
    messages hold the text). One query."""
    events = RunEvent.objects.filter(run_id__in=run_ids).order_by("run_id", "seq")
    events = events.exclude(type="text.delta", run_id__in=finished_ids)
    return events.only("run_id", "seq", "type", "payload")


def run_events_through(*, run_id: int, seq: int) -> QuerySet:
    """The run's events up to sequence number `seq`, in order (a stream resuming)."""
    return RunEvent.objects.filter(run_id=run_id, seq__lte=seq).order_by("seq")


def runs_approvals(*, run_ids: list[int]) -> list[Approval]:
    """The approvals of these runs and of their child runs (a crew's members), oldest
    first, with their runs. One query."""
    if not run_ids:
        return []
    approvals = Approval.objects.filter(run_id__in=run_ids) | Approval.objects.filter(
        run__parent_id__in=run_ids
    )
    return list(approvals.select_related("run").order_by("created_at", "pk"))


def run_streamed(*, tenant_id: int, run_id: int) -> Run:
    """The tenant's run afresh, with its agent, crew and verifications (a stream's footer).
    Two queries."""
    runs = Run.objects.select_related("agent", "crew", "workflow")
    runs = runs.prefetch_related("verifications")
    return runs.get(tenant_id=tenant_id, pk=run_id)


# -- platform figures (the operator's /metrics: every tenant, under rls.owner) ---------------
def run_totals_by_tenant(*, sums: dict[str, str]) -> list[dict[str, Any]]:
    """Per tenant and status: the runs (`n`) and, under each key of `sums`, the sum of the
    run field it names. One aggregate query over the runs table."""
    totals = {name: Sum(field) for name, field in sums.items()}
    rows = Run.objects.values("tenant_id", "status").annotate(n=Count("id"), **totals)
    return list(rows.order_by())


def run_cost_by_tenant() -> dict[int, Any] | None:
    """Each tenant's summed run cost, where runs record one (a `cost_usd` field); else None.
    One aggregate query."""
    if not any(f.name == "cost_usd" for f in Run._meta.concrete_fields):
        return None
    rows = Run.objects.values("tenant_id").annotate(cost=Sum("cost_usd")).order_by()
    return dict(rows.values_list("tenant_id", "cost"))


def run_durations_by_tenant(*, bounds: tuple[float, ...]) -> list[dict[str, Any]]:
    """Per tenant, of finished runs: `total`, summed `seconds` (a timedelta) and `le<i>`, how
    many took at most `bounds[i]` seconds. One query (a filtered count per bound)."""
    duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    counts = {
        f"le{i}": Count("id", filter=Q(duration__lte=timedelta(seconds=bound)))
        for i, bound in enumerate(bounds)
    }
    rows = (
        Run.objects.filter(finished_at__isnull=False, started_at__isnull=False)
        .annotate(duration=duration)
        .values("tenant_id")
        .annotate(total=Count("id"), seconds=Sum("duration"), **counts)
        .order_by()
    )
    return list(rows)


def tool_errors_by_tenant() -> QuerySet:
    """Tool calls that ended in an error, per tenant and tool (`n`): on the partial index
    `run_event_tool_error`, so only those events are read."""
    return (
        RunEvent.objects.filter(TOOL_ERROR_EVENT)
        .values("tenant_id", tool=KT("payload__name"))
        .annotate(n=Count("id"))
        .order_by()
    )


# -- the activity pages: runs, approvals, timelines ---------------------------------------------
def agents_by_name(*, tenant: Tenant) -> QuerySet:
    """The tenant's agents (active or not) by name: a filter's or a form's choices."""
    return Agent.objects.filter(tenant=tenant).order_by("name")


def top_level_runs(
    *,
    principal: Principal,
    agent: Agent | None = None,
    status: str | None = None,
    created_from: datetime | None = None,
    created_before: datetime | None = None,
) -> QuerySet:
    """The top-level runs the principal may see, newest first, with their agent, crew and
    initiator; only those matching what is given."""
    runs = filter_given(
        access.visible_runs(principal).filter(parent__isnull=True),
        agent=agent,
        status=status or None,  # an empty choice is any status
        created_at__gte=created_from,
        created_at__lt=created_before,
    )
    runs = runs.select_related(
        "agent", "crew", "workflow", "initiated_by_user", "initiated_by_api_key"
    )
    return runs.order_by("-created_at", "-id")


def child_runs(*, principal: Principal, run: Run) -> QuerySet:
    """The run's child runs the principal may see, in order, with their agent and crew."""
    children = access.visible_runs(principal).filter(parent=run)
    return children.select_related("agent", "crew", "workflow").order_by("id")


def run_events_for_timeline(*, run: Run, limit: int) -> list[RunEvent]:
    """At most `limit` of the run's events in order, without text deltas (its messages hold
    the text). One query."""
    events = RunEvent.objects.filter(run=run).exclude(type="text.delta")
    return list(events.order_by("seq")[:limit])


def run_own_approvals(*, run: Run) -> QuerySet:
    """The run's own approvals in the order they were asked (not its children's)."""
    return Approval.objects.filter(run=run).order_by("pk")


def run_verifications(run: Run) -> list:
    """The run's verdicts, oldest first; no query when they were prefetched."""
    return list(run.verifications.all())


def approvals_pending(*, principal: Principal, limit: int) -> list[Approval]:
    """The pending approvals of the runs the principal sees, oldest first, at most `limit`,
    with their run, agent and crew. One query."""
    pending = _approvals_shown(principal).filter(status=ApprovalStatus.PENDING)
    return list(pending.order_by("created_at", "id")[:limit])


def approvals_decided(*, principal: Principal, limit: int) -> list[Approval]:
    """The `limit` most recently decided approvals of the runs the principal sees. One
    query."""
    decided = _approvals_shown(principal).exclude(status=ApprovalStatus.PENDING)
    return list(decided.order_by("-decided_at", "-id")[:limit])


def approvals_pending_count(*, principal: Principal) -> int:
    visible = access.visible_approvals(principal)
    return visible.filter(status=ApprovalStatus.PENDING).count()


def _approvals_shown(principal: Principal) -> QuerySet:
    return access.visible_approvals(principal).select_related("run", "run__agent", "run__crew")


# -- usage figures (the usage page): aggregated in PostgreSQL ------------------------------
class _Percentile(Aggregate):
    """PostgreSQL's percentile_cont: linear interpolation between the closest ranks."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


class _EpochSeconds(Func):
    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
    output_field = FloatField()


def runs_per_day(*, runs: QuerySet, since: datetime, series: tuple[str, ...]) -> list[dict]:
    """Of `runs` created since `since`, per day (`day`) and `series` fields: `count`, and
    `input` and `output` tokens. One query."""
    rows = runs.filter(created_at__gte=since).annotate(day=TruncDate("created_at"))
    rows = rows.values("day", *series).annotate(
        count=Count("id"), input=Sum("input_tokens"), output=Sum("output_tokens")
    )
    return list(rows.order_by())


def run_latency_per_series(*, runs: QuerySet, since: datetime, series: tuple[str, ...]) -> list:
    """Of `runs` created since `since` that started and finished, per `series` fields:
    `count` and the `p50` and `p95` of their seconds from start to end. One query."""
    seconds = _EpochSeconds(F("finished_at") - F("started_at"))
    rows = runs.filter(
        created_at__gte=since, started_at__isnull=False, finished_at__isnull=False
    ).values(*series)
    rows = rows.annotate(
        count=Count("id"), p50=_Percentile(seconds, 0.5), p95=_Percentile(seconds, 0.95)
    )
    return list(rows.order_by())


def tool_calls_per_name(*, runs: QuerySet, since: datetime) -> list[dict]:
    """The tool calls of `runs` (created since `since`) completed since `since`, per tool
    name (`tool`): `calls`, and `errors` (those that ended in an error). One query."""
    rows = (
        RunEvent.objects.filter(
            run__in=runs.filter(created_at__gte=since).values("id"),
            type="tool.completed",
            created_at__gte=since,
        )
        .annotate(tool=KT("payload__name"), failure=KT("payload__error"))
        .values("tool")
        .annotate(
            calls=Count("id"),
            errors=Count("id", filter=Q(failure__isnull=False) & ~Q(failure="")),
        )
        .order_by("tool")
    )
    return list(rows)


def dataset_with_judge(*, tenant: Tenant, dataset_id: Any) -> Dataset:
    """The tenant's dataset with its judge connection; 404 otherwise."""
    datasets = Dataset.objects.select_related("judge_connection")
    return get_for_tenant(datasets, tenant, pk=_int(dataset_id))


def dataset_evaluations(
    *, principal: Principal, dataset_id: int, but: int | None = None, limit: int = 50
) -> list:
    """The evaluations of the dataset the principal may see (agents.evaluations), newest
    first, at most `limit`, leaving out the evaluation `but`. One query."""
    evaluations = visible_evaluations(principal).filter(dataset=dataset_id)
    if but is not None:
        evaluations = evaluations.exclude(pk=but)
    return list(evaluations[:limit])


def evaluation_results(*, evaluation: Evaluation) -> QuerySet:
    """The evaluation's results with their runs."""
    return evaluation.results.select_related("run")


def feedback_given(*, run: Run, user: AbstractBaseUser) -> Feedback | None:
    """The user's feedback on the run, or None. One query."""
    return Feedback.objects.filter(run=run, user=user).first()


def agents_with_connections(*, tenant: Tenant) -> QuerySet:
    """The tenant's agents (active or not) with their provider connections."""
    return Agent.objects.filter(tenant=tenant).select_related("provider_connection")


def agent_and_crew_slugs(*, tenant: Tenant) -> list[str]:
    """The slugs of the tenant's agents and crews (active or not), sorted. Two queries."""
    agents = Agent.objects.filter(tenant=tenant).values_list("slug", flat=True)
    crews = Crew.objects.filter(tenant=tenant).values_list("slug", flat=True)
    return sorted({*agents, *crews})


def crew_member_ids(crew: Crew) -> list[int]:
    """The crew's member agents' ids, in order. One query unless its members were
    prefetched."""
    return [member.agent_id for member in crew.members.all()]


def agents_by_slug(*, tenant: Tenant) -> QuerySet:
    """The tenant's agents (active or not) by slug: a form's choices."""
    return Agent.objects.filter(tenant=tenant).order_by("slug")


def crews_by_name(*, tenant: Tenant) -> QuerySet:
    """The tenant's crews (active or not) by name: a form's choices."""
    return Crew.objects.filter(tenant=tenant).order_by("name")


def workflows_by_name(*, tenant: Tenant) -> QuerySet:
    """The tenant's workflows (enabled or not) by name: a form's choices."""
    return WorkflowDefinition.objects.filter(tenant=tenant).order_by("name")


def runs_with_targets(runs: QuerySet, *, limit: int) -> list[Run]:
    """The first `limit` of `runs` with their agent and crew. One query."""
    return list(runs.select_related("agent", "crew")[:limit])
