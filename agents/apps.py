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
