"""A tenant holding some of everything (agents, crews, conversations and messages, runs with
events, facts, documents, attachments and their files, triggers, keys, groups and grants,
quotas, audit entries, Redis keys), made through the services where they have side effects
that matter here (files, groups, keys) and the ORM elsewhere. Its names all carry MARK."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.core.cache import cache

from agents import services as agent_services
from agents.conversations import attachment_upload
from agents.models import Conversation, Fact, Message, Quota, Run, RunEvent, Trigger
from base import rate_counters, versions
from lifecycle.erasure import run_keys, tenant_version_keys
from lifecycle.models import TenantErasureRequest
from rag.models import KnowledgeBase
from rag.services import document_add
from tenancy import services as tenancy_services
from tenancy.models import ApiKey, Role, Tenant
from tenancy.records import audit
from tests.factories import (
    add_member,
    make_agent,
    make_connection,
    make_crew,
    make_tenant,
    make_tool,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@dataclass
class Held:
    tenant: Tenant
    runs: list[Run]
    quota: Quota
    key: ApiKey
    trigger: Trigger


def full_tenant(slug: str, owner, member, *, mark: str, runs: int = 3, events: int = 5) -> Held:
    tenant = make_tenant(slug, owner=owner)
    tenant.name = f"{mark} Corp"
    tenant.save(update_fields=["name"])
    add_member(tenant, member, Role.MEMBER)
    connection = make_connection(tenant, name=f"{mark} conn", api_key="sk-offboard-secret")
    agent = make_agent(
        tenant, f"{slug}-agent", name=f"{mark} agent", provider_connection=connection
    )
    make_crew(tenant, f"{slug}-crew", members=[agent], name=f"{mark} crew")
    make_tool(tenant, name=f"{slug.replace('-', '_')}_calc", description=f"{mark} calc")
    group = tenancy_services.group_create(tenant=tenant, name=f"{mark} group")
    agent_services.use_grant(tenant=tenant, target=agent, group=group, granted=True)
    agent_services.use_grant(tenant=tenant, target=agent, user=member, granted=True)
    api_key, _ = tenancy_services.api_key_create(tenant=tenant, name=f"{mark} key", scopes=["run"])
    made = []
    for n in range(runs):
        conversation = Conversation.objects.create(
            tenant=tenant, agent=agent, owner_user=member, title=f"{mark} chat {n}"
        )
        run = Run.objects.create(
            tenant=tenant, agent=agent, conversation=conversation, initiated_by_user=member,
            input=f"{mark} question {n}", output=f"{mark} answer {n}", status="succeeded",
            correlation_id=uuid.uuid4().hex, input_tokens=10, output_tokens=5,
            cost_usd=Decimal("0.01"),
        )  # fmt: skip
        RunEvent.objects.bulk_create(
            RunEvent(tenant=tenant, run=run, seq=s, type="text.delta", payload={"t": mark})
            for s in range(1, events + 1)
        )
        question = Message.objects.create(
            tenant=tenant, conversation=conversation, role="user", content=f"{mark} question"
        )
        Message.objects.create(
            tenant=tenant, conversation=conversation, parent=question, run=run,
            role="assistant", content=f"{mark} answer",
        )  # fmt: skip
        Fact.objects.create(
            tenant=tenant, user=member, text=f"{mark} likes tea {n}", source_run=run
        )
        versions.shared_redis().set(run_keys(run)[0], mark)
        made.append(run)
    attachment_upload(
        tenant=tenant, conversation=made[0].conversation, by=member, name="a.png", data=PNG
    )
    knowledge = KnowledgeBase.objects.create(tenant=tenant, name=f"{mark} kb", slug=f"{slug}-kb")
    document_add(tenant=tenant, knowledge_base=knowledge, title=f"{mark} doc", text=f"{mark} text")
    trigger = Trigger.objects.create(
        tenant=tenant, public_id=f"pub-{uuid.uuid4().hex}", name=f"{mark} hook",
        kind="webhook", agent=agent, input_template=f"{mark} {{body}}",
    )  # fmt: skip
    quota = Quota.objects.create(
        tenant=tenant, scope="tenant", metric="tokens", period="day", limit=Decimal(100)
    )
    audit.record(tenant=tenant, action="config.changed", actor=owner, details={"x": mark})
    TenantErasureRequest.objects.create(tenant=tenant, requested_by=owner, reason=f"{mark} leaves")
    for key in tenant_version_keys(tenant.pk):
        versions.current(key)
    rate_counters.hit(f"tool-rate:{tenant.pk}:calc", 60)
    rate_counters.hit(f"throttle:key:{api_key.pk}", 60)
    rate_counters.hit(f"throttle:tenant:{tenant.pk}", 60)
    rate_counters.hit(f"trigger-hook:{trigger.public_id}", 60)
    versions.shared_redis().set(cache.make_key(f"quota:{quota.pk}:20260101"), 1)
    return Held(tenant=tenant, runs=made, quota=quota, key=api_key, trigger=trigger)


def redis_keys_made(held: Held) -> list[str]:
    """The Redis keys `full_tenant` wrote (the shared Redis outlives a test's database)."""
    tenant_id = held.tenant.pk
    return [k for run in held.runs for k in run_keys(run)] + [
        cache.make_key(name)
        for name in (
            f"tool-rate:{tenant_id}:calc",
            f"throttle:key:{held.key.pk}",
            f"throttle:tenant:{tenant_id}",
            f"trigger-hook:{held.trigger.public_id}",
            f"quota:{held.quota.pk}:20260101",
        )
    ]


def forget_redis(*held: Held) -> None:
    versions.shared_redis().delete(*[key for h in held for key in redis_keys_made(h)])
