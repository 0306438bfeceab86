from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        load_plugins()

        from django.db.models.signals import post_delete

        from agentplatform.tenancy.models import Membership
        from agents import tasks  # noqa: F401  (sends queued runs to the workers)

        post_delete.connect(_member_left, sender=Membership, dispatch_uid="agents-member-left")

        from providers.services import connection_renamed

        connection_renamed.connect(_fallbacks_follow, dispatch_uid="agents-fallbacks-follow")

        from agentplatform.config_checks import register_config_check
        from agents.config_saves import check_saved_object

        # Every save of a connection, tool, agent or crew compiles the tenant's whole graph.
        register_config_check(check_saved_object)


def _member_left(sender, instance, **kwargs) -> None:
    from agents.services import member_grants_forget

    member_grants_forget(membership=instance)


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
    """Agent kinds and tool sources: their plug-ins (agentplatform/plugins.py). Loading
    again adds what was installed since (what is there already stays)."""
    from agentplatform import plugins
    from agents.runtime.kinds import register_kind
    from agents.tool_sources import add_tool_source

    for plugin in plugins.load(plugins.AGENT_KINDS):
        register_kind(plugin.name, plugin.value)
    for plugin in plugins.load(plugins.TOOL_SOURCES):
        value = plugin.value
        add_tool_source(
            value,
            label=getattr(value, "label", plugin.name),
            domains=getattr(value, "domains", ()),
            names=getattr(value, "tool_names", ()),
        )
