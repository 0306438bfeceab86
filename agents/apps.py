from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        load_plugins()

        from django.db.models.signals import post_delete

        from agents import tasks  # noqa: F401  (sends queued runs to the workers)
        from tenancy.models import Membership

        post_delete.connect(_member_left, sender=Membership, dispatch_uid="agents-member-left")

        from providers.services import connection_renamed

        connection_renamed.connect(_fallbacks_follow, dispatch_uid="agents-fallbacks-follow")

        from agents.config_saves import check_saved_object, problems_saving_together
        from base.config_checks import register_config_check, register_group_check

        # Every save of a connection, tool, agent or crew compiles the tenant's whole graph;
        # several saved together (the OpenAPI import), once for all of them.
        register_config_check(check_saved_object)
        register_group_check(problems_saving_together)

        from agents.workflows import refusals_to_delete
        from base.config_checks import register_delete_check

        # A tool or agent a saved workflow names is not deleted from under it.
        register_delete_check(refusals_to_delete)

        from agents.publishing import draft_evaluated
        from agents.signals import evaluation_ended

        # A draft's evaluation ended: publish the draft if it passed (docs/evaluations.md).
        evaluation_ended.connect(draft_evaluated, dispatch_uid="agents-draft-evaluated")

        start_tracing()
        register_history()


def start_tracing() -> None:
    """Spans of runs, model and tool calls exported over OTLP, where an endpoint is
    configured; otherwise nothing is loaded or installed (agents/runtime/tracing.py)."""
    from django.conf import settings

    if not settings.OTEL_EXPORTER_OTLP_ENDPOINT:
        return
    from agents.runtime import tracing

    try:
        tracing.install_otlp(
            settings.OTEL_EXPORTER_OTLP_ENDPOINT, service_name=settings.OTEL_SERVICE_NAME
        )
    except ImportError:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
            "pip install 'agentplatform[otel]' (or unset it)."
        ) from None


def register_history() -> None:
    """Agents and crews are versioned (docs/config-history.md) with who holds their use
    grants, a crew with its members; a restore saves through agent_save / crew_save and
    sets the grants as they were. Workflows are versioned too (restored by workflow_save)."""
    from agents import publishing, skills
    from agents.models import Agent, Crew
    from agents.selectors import crew_member_slugs, crew_members_named, use_grant_holders
    from agents.services import agent_save, crew_save, use_grants_set
    from tenancy.records import history

    # A gated agent's or crew's restore is a draft like any change (agents.publishing),
    # keeping today's gate (restore_changes): so it never weakens the gate, and who restores
    # (`change_config`, checked by the face) acts as the platform (`by=None`) here. Who
    # holds its use is not its behaviour: set at once.
    def restore_agent(tenant, agent, changes):
        changes = publishing.restore_changes(agent, changes)
        holders = changes.pop("grants", None)
        pins = changes.pop("skills", None)
        saved = agent_save(tenant=tenant, agent=agent, changes=changes, pins=pins, by=None)
        if holders is not None:
            use_grants_set(tenant=tenant, target=saved, holders=holders)
        return saved

    def restore_crew(tenant, crew, changes):
        changes = publishing.restore_changes(crew, changes)
        members, holders = changes.pop("members", None), changes.pop("grants", None)
        saved = crew_save(tenant=tenant, crew=crew, changes=changes, members=members, by=None)
        if holders is not None:
            use_grants_set(tenant=tenant, target=saved, holders=holders)
        return saved

    grants = {"grants": history.grants_of}
    history.register(
        Agent,
        name="agents",
        noun="agent",
        restore=restore_agent,
        parts={**grants, "skills": skills.agent_pin_labels},
        restore_parts={"grants": use_grant_holders, "skills": skills.pins_parsed},
    )
    history.register(
        skills.Skill,
        name="skills",
        noun="skill",
        restore=skills.skill_restore_refused,
        parts={"versions": skills.skill_version_states},
    )
    history.register(
        Crew,
        name="crews",
        noun="crew",
        restore=restore_crew,
        parts={"members": crew_member_slugs, **grants},
        restore_parts={"members": crew_members_named, "grants": use_grant_holders},
    )

    from agents import workflows
    from agents.models import WorkflowDefinition

    history.register(
        WorkflowDefinition,
        name="workflows",
        noun="workflow",
        restore=lambda tenant, workflow, changes: workflows.workflow_save(
            tenant=tenant, workflow=workflow, changes=changes
        ),
    )


def _member_left(sender, instance, origin=None, **kwargs) -> None:
    from agents.memory import member_facts_forget
    from agents.services import member_grants_forget
    from tenancy.models import Tenant

    member_grants_forget(membership=instance)
    if getattr(origin, "model", type(origin)) is not Tenant:  # (a tenant's go with it)
        member_facts_forget(tenant_id=instance.tenant_id, user_id=instance.user_id)


def _fallbacks_follow(sender, tenant_id: int, old: str, new: str, **kwargs) -> None:
    """Agents whose fallbacks name a renamed connection name its new name."""
    from agents.models import Agent

    named = Agent.objects.filter(tenant_id=tenant_id, fallbacks__contains=[{"connection": old}])
    for agent in named:
        fallbacks = [
            {**f, "connection": new} if f.get("connection") == old else f for f in agent.fallbacks
        ]
        Agent.objects.filter(pk=agent.pk).update(fallbacks=fallbacks)


def load_plugins() -> None:
    """Agent kinds and tool sources: their plug-ins (base/plugins.py). Loading
    again adds what was installed since (what is there already stays)."""
    from agents.runtime.kinds import register_kind
    from agents.tool_sources import add_tool_source
    from base import plugins

    for plugin in plugins.load(plugins.AGENT_KINDS):
        register_kind(plugin.name, plugin.value)
    for plugin in plugins.load(plugins.TOOL_SOURCES):
        value = plugin.value
        add_tool_source(
            value,
            label=getattr(value, "label", plugin.name),
            domains=getattr(value, "domains", ()),
            names=getattr(value, "tool_names", ()),
            needs_user=getattr(value, "needs_user", False),
            key_runs=getattr(value, "key_runs", None),
        )
