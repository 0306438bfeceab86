from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        load_plugins()

        from django.db.models.signals import post_delete

        from agentplatform.tenancy.models import Membership
        from agents import tasks  # noqa: F401  (sends queued runs to the workers)

        post_delete.connect(_member_left, sender=Membership, dispatch_uid="agents-member-left")


def _member_left(sender, instance, **kwargs) -> None:
    from agents.services import member_grants_forget

    member_grants_forget(membership=instance)


def load_plugins() -> None:
    """Agent kinds and tool sources: their plug-ins (agentplatform/plugins.py). Loading
    again adds what was installed since (what is there already stays)."""
    from agentplatform import plugins
    from agents.runtime.kinds import register_kind
    from agents.tool_sources import add_tool_source

    for plugin in plugins.load(plugins.AGENT_KINDS):
        register_kind(plugin.name, plugin.value)
    for plugin in plugins.load(plugins.TOOL_SOURCES):
        label = getattr(plugin.value, "label", plugin.name)
        add_tool_source(plugin.value, label=label, domains=getattr(plugin.value, "domains", ()))
