from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"

    def ready(self) -> None:
        # (Its tool sources are plug-ins: pyproject.toml, agentplatform.tool_sources.)
        from rag.context_provider import knowledge_bases_check_health, knowledge_providers_of
        from tools.context_providers import register_health_check, register_provider_lister

        register_health_check("knowledge_base", knowledge_bases_check_health)
        register_provider_lister("knowledge_base", knowledge_providers_of)

        from agents.config_document import register_document_section
        from rag.config_section import KNOWLEDGE_BASES

        register_document_section(KNOWLEDGE_BASES)  # knowledge bases in the document
        from agents.memory import register_fact_embedder
        from agents.tool_routing import register_routing_embedder
        from rag.embedders import local_embedder, local_model_installed, static_embedder

        if local_model_installed():  # the local-embeddings extra: MiniLM ranks best
            from rag.runtime.minilm_onnx import OnnxMiniLM

            # Each request on onnxruntime (bench/routing.py): the local model itself unless
            # that runs on torch (the same vectors either way).
            model = local_embedder()
            requests = model if isinstance(model, OnnxMiniLM) else OnnxMiniLM()
            register_routing_embedder(cards=model, requests=requests)
            register_fact_embedder(requests)  # facts and queries: one short text a call
        else:  # the base install: the static model (recall@10 0.77 against MiniLM's 0.86)
            register_routing_embedder(cards=static_embedder(), requests=static_embedder())
            register_fact_embedder(static_embedder())
        from agents.conversations import DocumentReading, register_document_reading
        from rag.attachment_reading import read_attachment

        # The chat's attached documents: read and embedded as a knowledge base's are.
        register_document_reading(DocumentReading(read_attachment, static_embedder()))
        from rag import signals  # noqa: F401 (connects its receivers)
        from rag.models import KnowledgeBase
        from rag.services import knowledge_base_save
        from tenancy.records import history

        # Its settings are versioned (docs/config-history.md); documents are data, not.
        history.register(
            KnowledgeBase,
            name="knowledge-bases",
            noun="knowledge base",
            restore=lambda tenant, obj, changes: knowledge_base_save(
                tenant=tenant, knowledge_base=obj, changes=changes
            ),
        )
