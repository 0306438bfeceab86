from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"

    def ready(self) -> None:
        from agents.tool_sources import register_tool_source
        from rag.tools import knowledge_tool_for_agent

        register_tool_source(knowledge_tool_for_agent, label="knowledge")
        from rag import signals  # noqa: F401 (connects its receivers)
