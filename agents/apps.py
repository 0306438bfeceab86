from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        # Workflows registered as tools join the built-ins, the way every tool registers.
        from agents.runtime import remote  # noqa: F401  (registers the "remote" agent kind)
        from agents.runtime.example_workflows import EXAMPLE_WORKFLOW_TOOLS
        from tools.runtime.builtins import BUILTINS

        for item in EXAMPLE_WORKFLOW_TOOLS:
            if not BUILTINS.has(item.name):
                BUILTINS.register(item)

        from django.db.models.signals import post_delete

        from agentplatform.tenancy.models import Membership
        from agents import tasks  # noqa: F401  (sends queued runs to the workers)

        post_delete.connect(_member_left, sender=Membership, dispatch_uid="agents-member-left")

        from agentplatform.config_checks import register_config_check
        from agents.config_saves import check_saved_object

        # Every save of a connection, tool, agent or crew compiles the tenant's whole graph.
        register_config_check(check_saved_object)


def _member_left(sender, instance, **kwargs) -> None:
    from agents.services import member_grants_forget

    member_grants_forget(membership=instance)
