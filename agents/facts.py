"""The memory tools' store: Fact rows, always filtered by tenant and user."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from agents.models import Fact


class DjangoFactStore:
    def __init__(self, *, run_id: int | None = None) -> None:
        self.run_id = run_id

    async def remember(self, *, tenant_id, user_id, text, run_id) -> str:
        fact = await Fact.objects.acreate(
            tenant_id=tenant_id, user_id=user_id, text=text, source_run_id=self.run_id
        )
        return str(fact.pk)

    async def recall(self, *, tenant_id, user_id, query, limit) -> list[dict[str, str]]:
        facts = Fact.objects.filter(tenant_id=tenant_id, user_id=user_id)
        for word in query.split()[:5]:
            facts = facts.filter(text__icontains=word)
        rows = await sync_to_async(list)(facts.order_by("-id").values_list("pk", "text")[:limit])
        return [{"id": str(pk), "text": text} for pk, text in rows]

    async def forget(self, *, tenant_id, user_id, fact_id) -> bool:
        if not str(fact_id).isdigit():
            return False
        deleted, _ = await Fact.objects.filter(
            pk=int(fact_id), tenant_id=tenant_id, user_id=user_id
        ).adelete()
        return bool(deleted)
