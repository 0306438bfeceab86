from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        load_plugins()

        from django.db.models.signals import post_delete

        from agentplatform.tenancy.models import Membership
        from agents import tasks  # noqa: F401  (sends queued runs to the workers)

        post_delete.connect(_member_left, sender=Membership, dispatch_uid="agents-member-left")

        from agentplatform.config_checks import register_config_check
        from agents.config_saves import check_saved_object

        # Every save of a connection, tool, agent or crew compiles the tenant's whole graph.
        register_config_check(check_saved_object)
        start_tracing()


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
        value = plugin.value
        add_tool_source(
            value,
            label=getattr(value, "label", plugin.name),
            domains=getattr(value, "domains", ()),
            names=getattr(value, "tool_names", ()),
        )
