"""Retention: how long a tenant's data is kept, and the periodic purge of what is older.

What goes, per tenant (its RetentionPolicy, else the platform's RETENTION_*_DAYS):
- runs finished more than `run_days` ago are compacted: their events, checkpoint (`state`)
  and API request go; the row stays (status, agent, model, tokens, cost, timings, input and
  output), so usage and cost figures never change;
- conversations untouched for `conversation_days` go with their messages and attachments
  (the stored files too); their runs stay, without a conversation;
- attachments older than `attachment_days` go (stored file first, then the row);
- audit entries older than `audit_days` go.
Never touched: a tenant under legal hold, a held conversation (its runs, messages and
attachments), a run not yet ended, a conversation with a run not yet ended.

Every statement is bounded: rows are selected by id in order, `batch` at a time, and deleted
by that id list, each batch in a transaction of its own with the audit entry that counts it
(counts, never content). So a purge killed half-way has lost nothing it did not record, and
the next one carries on to the same end state. Each tenant is purged in its own row-level
security scope (`rls.tenant_scope`): its statements cannot reach another tenant's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.files.storage import storages
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agents.models import Attachment, Conversation, Message, Run, RunEvent
from agents.runtime.spec import TERMINAL
from lifecycle.models import LegalHold, RetentionPolicy
from tenancy import rls
from tenancy.models import AuditAction, AuditEntry, Tenant
from tenancy.records import audit

KINDS = ("run_days", "conversation_days", "attachment_days", "audit_days")


@dataclass(frozen=True)
class Retention:
    """A tenant's retention in effect: days per kind (None: forever), and its hold."""

    run_days: int | None = None
    conversation_days: int | None = None
    attachment_days: int | None = None
    audit_days: int | None = None
    legal_hold: bool = False


@dataclass
class Purged:
    """What one tenant's purge removed."""

    run_events: int = 0
    runs_compacted: int = 0
    conversations: int = 0
    messages: int = 0
    attachments: int = 0
    audit_entries: int = 0
    held_conversations: int = 0
    skipped: str = ""  # why nothing was purged ("legal hold")
    batches: list[dict[str, int]] = field(default_factory=list, repr=False)


def platform_default() -> Retention:
    return Retention(
        run_days=settings.RETENTION_RUN_DAYS,
        conversation_days=settings.RETENTION_CONVERSATION_DAYS,
        attachment_days=settings.RETENTION_ATTACHMENT_DAYS,
        audit_days=settings.RETENTION_AUDIT_DAYS,
    )


def retention_in_effect(policy: RetentionPolicy | None) -> Retention:
    """A tenant's policy over the platform's default: an empty field follows the default,
    0 keeps forever."""
    default = platform_default()
    if policy is None:
        return default
    days = {}
    for kind in KINDS:
        value = getattr(policy, kind)
        days[kind] = getattr(default, kind) if value is None else (value or None)
    return Retention(**days, legal_hold=policy.legal_hold)


def _cutoff(now: datetime, days: int | None) -> datetime | None:
    return None if days is None else now - timedelta(days=days)


# -- the periodic purge --------------------------------------------------------------------
def retention_purge(*, now: datetime | None = None, batch: int | None = None) -> dict[int, Purged]:
    """Purge every tenant's data past its retention (the beat's task). Returns what went, per
    tenant purged. Each tenant in its own scope; the tenant list is read for every tenant."""
    now = now or timezone.now()
    with rls.owner():  # the list of tenants, across tenants: a housekeeping sweep
        tenant_ids = list(Tenant.objects.order_by("pk").values_list("pk", flat=True))
    return {tid: tenant_purge(tenant_id=tid, now=now, batch=batch) for tid in tenant_ids}


def tenant_purge(
    *, tenant_id: int, now: datetime | None = None, batch: int | None = None
) -> Purged:
    """Purge one tenant's data past its retention, inside that tenant's row-level scope.
    Idempotent: run again after any interruption, it reaches the same end state."""
    now = now or timezone.now()
    batch = batch or settings.RETENTION_BATCH
    with rls.tenant_scope(tenant_id):
        policy = RetentionPolicy.objects.filter(tenant_id=tenant_id).first()
        keep = retention_in_effect(policy)
        purged = Purged()
        if keep.legal_hold:
            purged.skipped = "legal hold"
            return purged
        held = list(
            LegalHold.objects.filter(tenant_id=tenant_id).values_list("conversation_id", flat=True)
        )
        purged.held_conversations = len(held)
        purge = _TenantPurge(tenant_id, now, batch, held, purged)
        if (cutoff := _cutoff(now, keep.conversation_days)) is not None:
            purge.conversations(cutoff)
        if (cutoff := _cutoff(now, keep.attachment_days)) is not None:
            purge.attachments(cutoff)
        if (cutoff := _cutoff(now, keep.run_days)) is not None:
            purge.run_events(cutoff)
            purge.runs_compacted(cutoff)
        if (cutoff := _cutoff(now, keep.audit_days)) is not None:
            purge.audit_entries(cutoff)
        return purged


class _TenantPurge:
    def __init__(self, tenant_id: int, now: datetime, batch: int, held: list[int], out: Purged):
        self.tenant_id, self.now, self.batch, self.held, self.out = tenant_id, now, batch, held, out

    def _record(self, counts: dict[str, int]) -> None:
        """The batch's audit entry, in the batch's transaction: counts only."""
        counts = {k: v for k, v in counts.items() if v}
        if not counts:
            return
        for kind, n in counts.items():
            setattr(self.out, kind, getattr(self.out, kind) + n)
        self.out.batches.append(counts)
        audit.record(
            tenant=self.tenant_id,
            action=AuditAction.RETENTION_PURGED,
            actor=audit.SYSTEM,
            details={"counts": counts},
        )

    def _not_held(self, queryset, conversation_field: str):
        if not self.held:
            return queryset
        return queryset.exclude(**{f"{conversation_field}__in": self.held})

    # Runs: events first, then the rows' heavy fields.
    def _old_runs(self, cutoff: datetime):
        runs = Run.objects.filter(
            tenant_id=self.tenant_id, status__in=TERMINAL, finished_at__lt=cutoff
        )
        return self._not_held(runs, "conversation_id")

    def run_events(self, cutoff: datetime) -> None:
        """Runs that still have events first (by the run index, each probed on the events'
        run index), then their events by id: both statements use an index, whatever the
        table's size."""
        has_events = Exists(RunEvent.objects.filter(run_id=OuterRef("pk")))
        while True:
            run_ids = list(
                self._old_runs(cutoff)
                .filter(has_events)
                .order_by("pk")
                .values_list("pk", flat=True)[: self.batch]
            )
            if not run_ids:
                return
            events = RunEvent.objects.filter(tenant_id=self.tenant_id, run_id__in=run_ids)
            while True:
                with transaction.atomic():
                    ids = list(events.order_by("pk").values_list("pk", flat=True)[: self.batch])
                    if not ids:
                        break
                    deleted, _ = RunEvent.objects.filter(pk__in=ids).delete()
                    self._record({"run_events": deleted})
                if len(ids) < self.batch:
                    break

    def runs_compacted(self, cutoff: datetime) -> None:
        heavy = self._old_runs(cutoff).exclude(state__isnull=True, client_request__isnull=True)
        while True:
            with transaction.atomic():
                ids = list(heavy.order_by("pk").values_list("pk", flat=True)[: self.batch])
                if not ids:
                    return
                n = Run.objects.filter(pk__in=ids).update(state=None, client_request=None)
                self._record({"runs_compacted": n})
            if len(ids) < self.batch:
                return

    # Conversations: attachments (files first), messages newest first, then the rows.
    def conversations(self, cutoff: datetime) -> None:
        active = Run.objects.filter(tenant_id=self.tenant_id).exclude(status__in=TERMINAL)
        old = self._not_held(
            Conversation.objects.filter(tenant_id=self.tenant_id, updated_at__lt=cutoff), "pk"
        ).exclude(pk__in=active.filter(conversation__isnull=False).values("conversation_id"))
        step = max(1, min(self.batch, 100))  # a conversation's rows are many: few at a time
        while True:
            ids = list(old.order_by("pk").values_list("pk", flat=True)[:step])
            if not ids:
                return
            self._attachments_delete(Attachment.objects.filter(conversation_id__in=ids))
            self._messages_delete(ids)
            self._runs_detached(ids)
            with transaction.atomic():
                deleted = Conversation.objects.filter(pk__in=ids).delete()[1]
                self._record({"conversations": deleted.get("agents.Conversation", 0)})
            if len(ids) < step:
                return

    def _messages_delete(self, conversation_ids: list[int]) -> None:
        # Newest first: a message's replies (higher ids) are gone before it, so the cascade
        # of `parent` finds nothing more than the batch.
        messages = Message.objects.filter(
            tenant_id=self.tenant_id, conversation_id__in=conversation_ids
        )
        while True:
            with transaction.atomic():
                ids = list(messages.order_by("-pk").values_list("pk", flat=True)[: self.batch])
                if not ids:
                    return
                deleted = Message.objects.filter(pk__in=ids).delete()[1]
                self._record({"messages": deleted.get("agents.Message", 0)})

    def _runs_detached(self, conversation_ids: list[int]) -> None:
        """The conversations' runs stay, without a conversation: set in batches, so that the
        conversations' deletion updates no run (a busy table) at all."""
        runs = Run.objects.filter(tenant_id=self.tenant_id, conversation_id__in=conversation_ids)
        while True:
            with transaction.atomic():
                ids = list(runs.order_by("pk").values_list("pk", flat=True)[: self.batch])
                if not ids:
                    return
                Run.objects.filter(pk__in=ids).update(conversation=None)
            if len(ids) < self.batch:
                return

    def attachments(self, cutoff: datetime) -> None:
        old = self._not_held(
            Attachment.objects.filter(tenant_id=self.tenant_id, created_at__lt=cutoff),
            "conversation_id",
        )
        self._attachments_delete(old)

    def _attachments_delete(self, attachments) -> None:
        """Their stored files, then their rows (with their passages): a purge killed between
        the two finds the rows again and deletes them; a missing file is no error."""
        storage = storages["attachments"]  # the chat's attachments storage
        while True:
            rows = list(attachments.order_by("pk").values_list("pk", "storage_key")[: self.batch])
            if not rows:
                return
            for _, key in rows:
                storage.delete(key)
            with transaction.atomic():
                deleted = Attachment.objects.filter(pk__in=[pk for pk, _ in rows]).delete()[1]
                self._record({"attachments": deleted.get("agents.Attachment", 0)})
            if len(rows) < self.batch:
                return

    # Audit entries: append-only, but for the entries of this tenant this transaction names.
    def audit_entries(self, cutoff: datetime) -> None:
        while True:
            with transaction.atomic():
                ids = list(
                    AuditEntry.objects.filter(tenant_id=self.tenant_id, at__lt=cutoff)
                    .order_by("pk")
                    .values_list("pk", flat=True)[: self.batch]
                )
                if not ids:
                    return
                audit.allow_purge(self.tenant_id)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "DELETE FROM tenancy_auditentry WHERE tenant_id = %s AND id = ANY(%s)",
                        [self.tenant_id, ids],
                    )
                    deleted = cursor.rowcount
                self._record({"audit_entries": deleted})
            if len(ids) < self.batch:
                return
