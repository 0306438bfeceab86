"""A tenant's data at known ages, for the retention tests: what a purge must remove and what
it must keep, and a count of each kind to compare end states."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.utils import timezone

from agents.models import Attachment, Conversation, Message, Run, RunEvent
from agents.runtime.spec import RunStatus
from lifecycle.models import RetentionPolicy
from tenancy.models import AuditAction, AuditEntry, Tenant

OLD = timedelta(days=100)
RECENT = timedelta(days=1)


@dataclass
class Rows:
    old_run: Run
    running_run: Run
    recent_run: Run
    old_conversation: Conversation
    busy_conversation: Conversation  # old, with a run not yet ended
    recent_conversation: Conversation
    old_attachment_keys: list[str]


def policy(tenant: Tenant, days: int | None = 30, **fields) -> RetentionPolicy:
    values = dict.fromkeys(("run_days", "conversation_days", "attachment_days", "audit_days"), days)
    return RetentionPolicy.objects.create(tenant=tenant, **(values | fields))


def _run(tenant: Tenant, status: str, age: timedelta, events: int, conversation=None) -> Run:
    at = timezone.now() - age
    run = Run.objects.create(
        tenant=tenant, status=status, correlation_id="c", input="hello", output="hi",
        conversation=conversation, cost_usd=Decimal("0.25"), input_tokens=10,
        state={"messages": ["hello"]}, last_seq=events,
    )  # fmt: skip
    finished = at if status == RunStatus.SUCCEEDED else None
    Run.objects.filter(pk=run.pk).update(created_at=at, finished_at=finished)
    RunEvent.objects.bulk_create(
        RunEvent(tenant=tenant, run=run, seq=n, type="text.delta", payload={"t": "x"})
        for n in range(1, events + 1)
    )
    return run


def _conversation(tenant: Tenant, age: timedelta, messages: int, files: int = 0):
    conversation = Conversation.objects.create(tenant=tenant, title="chat")
    parent, keys = None, []
    for n in range(messages):
        parent = Message.objects.create(
            tenant=tenant, conversation=conversation, parent=parent,
            role="user" if n % 2 == 0 else "assistant", content=f"turn {n}",
        )  # fmt: skip
    for n in range(files):
        key = storages["attachments"].save(
            f"t{tenant.pk}/c{conversation.pk}/f{n}", ContentFile(b"secret bytes")
        )
        keys.append(key)
        Attachment.objects.create(
            tenant=tenant, conversation=conversation, message=parent, name=f"f{n}.txt",
            kind="document", media_type="text/plain", size=12, sha256="0" * 64, storage_key=key,
        )  # fmt: skip
    at = timezone.now() - age
    Conversation.objects.filter(pk=conversation.pk).update(created_at=at, updated_at=at)
    Attachment.objects.filter(conversation=conversation).update(created_at=at)
    Message.objects.filter(conversation=conversation).update(created_at=at)
    return conversation, keys


def make_rows(tenant: Tenant, *, events: int = 5, messages: int = 4, files: int = 2) -> Rows:
    old_conversation, keys = _conversation(tenant, OLD, messages, files)
    busy, _ = _conversation(tenant, OLD, messages, 1)
    recent, _ = _conversation(tenant, RECENT, messages, 1)
    rows = Rows(
        old_run=_run(tenant, RunStatus.SUCCEEDED, OLD, events),
        running_run=_run(tenant, RunStatus.RUNNING, OLD, events, conversation=busy),
        recent_run=_run(tenant, RunStatus.SUCCEEDED, RECENT, events),
        old_conversation=old_conversation,
        busy_conversation=busy,
        recent_conversation=recent,
        old_attachment_keys=keys,
    )
    for age in (OLD, OLD, RECENT):
        AuditEntry.objects.create(
            tenant=tenant, at=timezone.now() - age, action=AuditAction.CONFIG_CHANGED
        )
    return rows


def counts(tenant: Tenant) -> dict[str, int]:
    """How many rows of each kind the tenant holds (its purge records excluded)."""
    return {
        "runs": Run.objects.filter(tenant=tenant).count(),
        "run_events": RunEvent.objects.filter(tenant=tenant).count(),
        "runs_with_state": Run.objects.filter(tenant=tenant, state__isnull=False).count(),
        "conversations": Conversation.objects.filter(tenant=tenant).count(),
        "messages": Message.objects.filter(tenant=tenant).count(),
        "attachments": Attachment.objects.filter(tenant=tenant).count(),
        "audit_entries": AuditEntry.objects.filter(tenant=tenant)
        .exclude(action=AuditAction.RETENTION_PURGED)
        .count(),
    }


def recorded(tenant: Tenant) -> dict[str, int]:
    """The sum of the counts the tenant's purge entries recorded."""
    total: dict[str, int] = {}
    for details in AuditEntry.objects.filter(
        tenant=tenant, action=AuditAction.RETENTION_PURGED
    ).values_list("details", flat=True):
        for kind, n in details["counts"].items():
            total[kind] = total.get(kind, 0) + n
    return total
