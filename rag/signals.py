"""Knowledge base and agent-link changes bump the tenant's configuration version
(tools.loader), so remembered agent-to-knowledge-base links are read again."""

from __future__ import annotations

from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from base.versions import config_changed
from rag.models import KnowledgeBase


@receiver([post_save, post_delete], sender=KnowledgeBase)
def _knowledge_base_changed(sender, instance: KnowledgeBase, **kwargs) -> None:
    config_changed(instance.tenant_id)


@receiver(m2m_changed, sender=KnowledgeBase.agents.through)
def _links_changed(sender, instance, action: str, **kwargs) -> None:
    if action.startswith("post_"):
        # `instance` is a KnowledgeBase or an Agent: both have tenant_id.
        config_changed(instance.tenant_id)
