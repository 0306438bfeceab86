from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "providers"

    def ready(self) -> None:
        # The `llm` built-in asks the run's tenant's connections: it joins the built-ins the
        # way every tool registers (tools cannot know connections; providers can).
        from providers.services import LLM_TOOL
        from tools.runtime.builtins import BUILTINS

        if not BUILTINS.has(LLM_TOOL.name):
            BUILTINS.register(LLM_TOOL)
