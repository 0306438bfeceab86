"""The retention purge (lifecycle/retention.py) on the real database and attachments storage:
what goes, what stays (a run's summary, runs not yet ended, held data, other tenants), its
audit entries, and that running it again changes nothing. The purge runs as the app role, so
the tenant policies bind it as in a worker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.files.storage import storages
from django.utils import timezone

from agents.models import Attachment, Conversation, Message, Run, RunEvent
from lifecycle.models import LegalHold
from lifecycle.retention import Purged, _TenantPurge, retention_purge, tenant_purge
from lifecycle.tasks import purge_retention
from tenancy import rls
from tenancy.models import AuditAction, AuditEntry
from tests.lifecycle.retention_rows import counts, make_rows, policy, recorded

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_app_role(monkeypatch):
    """Calls `call` as the app role (the worker's login); the test's own rows and checks stay
    the owner's."""

    def call_as_app_role(call, **kwargs):
        if django_settings.DB_ROW_LEVEL_SECURITY:
            monkeypatch.setattr(rls, "_app_role", django_settings.DB_APP_ROLE)
        try:
            return call(**kwargs)
        finally:
            monkeypatch.setattr(rls, "_app_role", None)

    return call_as_app_role


def test_it_purges_what_is_past_retention_and_keeps_each_runs_summary(trio, as_app_role):
    rows = make_rows(trio.acme)
    Run.objects.filter(pk=rows.old_run.pk).update(conversation=rows.old_conversation)
    policy(trio.acme, 30)

    purged = as_app_role(tenant_purge, tenant_id=trio.acme.pk)

    old = Run.objects.get(pk=rows.old_run.pk)
    assert old.conversation_id is None  # its conversation went; the run stays
    assert (old.status, old.cost_usd, old.input_tokens, old.output) == ("succeeded", 0.25, 10, "hi")
    assert old.state is None and not RunEvent.objects.filter(run=old).exists()
    # Runs not yet ended and recent ones keep everything.
    assert RunEvent.objects.filter(run=rows.running_run).count() == 5
    assert RunEvent.objects.filter(run=rows.recent_run).count() == 5
    assert Run.objects.get(pk=rows.running_run.pk).state is not None
    # The old conversation went with its messages, attachments and stored files.
    assert not Conversation.objects.filter(pk=rows.old_conversation.pk).exists()
    assert not Message.objects.filter(conversation_id=rows.old_conversation.pk).exists()
    assert not any(storages["attachments"].exists(key) for key in rows.old_attachment_keys)
    # An old conversation whose run still works stays, but its old attachment goes.
    assert Message.objects.filter(conversation=rows.busy_conversation).count() == 4
    assert not Attachment.objects.filter(conversation=rows.busy_conversation).exists()
    assert Conversation.objects.filter(pk=rows.recent_conversation.pk).exists()
    assert Attachment.objects.filter(conversation=rows.recent_conversation).count() == 1
    audit_log = AuditEntry.objects.filter(tenant=trio.acme)
    assert not audit_log.filter(at__lt=timezone.now() - timedelta(days=30)).exists()
    assert audit_log.filter(at__lt=timezone.now() - timedelta(hours=12)).count() == 1  # RECENT
    assert (purged.run_events, purged.runs_compacted, purged.conversations) == (5, 1, 1)
    assert (purged.messages, purged.attachments, purged.audit_entries) == (4, 3, 2)


def test_its_audit_entries_count_and_never_quote(trio, as_app_role):
    make_rows(trio.acme)
    policy(trio.acme, 30)
    purged = as_app_role(tenant_purge, tenant_id=trio.acme.pk)

    entries = AuditEntry.objects.filter(tenant=trio.acme, action=AuditAction.RETENTION_PURGED)
    assert entries.count() == len(purged.batches) > 0
    assert all(set(e.details) == {"counts"} for e in entries)
    assert all(isinstance(n, int) for e in entries for n in e.details["counts"].values())
    assert "turn" not in str(list(entries.values_list("details", flat=True)))
    assert recorded(trio.acme) == {
        "run_events": 5, "runs_compacted": 1, "conversations": 1, "messages": 4,
        "attachments": 3, "audit_entries": 2,
    }  # fmt: skip


def test_running_it_again_changes_nothing_in_small_batches(trio, as_app_role):
    make_rows(trio.acme, events=7, messages=5, files=3)
    policy(trio.acme, 30)
    first = as_app_role(tenant_purge, tenant_id=trio.acme.pk, batch=2)
    after_first, entries = counts(trio.acme), recorded(trio.acme)
    assert len(first.batches) > 8  # batches of two

    second = as_app_role(tenant_purge, tenant_id=trio.acme.pk, batch=2)
    assert second.batches == [] and counts(trio.acme) == after_first
    assert recorded(trio.acme) == entries


def test_another_tenants_rows_are_never_touched(trio, as_app_role):
    make_rows(trio.acme)
    make_rows(trio.globex)
    policy(trio.acme, 30)
    before = counts(trio.globex)

    as_app_role(retention_purge)  # globex has no policy: the platform's default keeps forever
    assert counts(trio.globex) == before and recorded(trio.globex) == {}
    assert counts(trio.acme) != counts(trio.globex)


def test_row_level_security_stops_a_purge_aimed_at_another_tenant(trio, as_app_role):
    """The second wall: statements naming globex's rows, in acme's scope, reach none."""
    rows = make_rows(trio.globex)
    before = counts(trio.globex)

    def aimed_at_globex():
        with rls.tenant_scope(trio.acme.pk):
            purge = _TenantPurge(trio.globex.pk, timezone.now(), 10, [], Purged())
            purge.run_events(timezone.now())
            purge.conversations(timezone.now())
            purge.attachments(timezone.now())

    as_app_role(aimed_at_globex)
    assert counts(trio.globex) == before
    assert all(storages["attachments"].exists(key) for key in rows.old_attachment_keys)


def test_a_legal_hold_on_the_tenant_stops_every_purge(trio, as_app_role):
    make_rows(trio.acme)
    policy(trio.acme, 30, legal_hold=True)
    before = counts(trio.acme)

    purged = as_app_role(tenant_purge, tenant_id=trio.acme.pk)
    assert purged.skipped == "legal hold" and counts(trio.acme) == before


def test_a_legal_hold_on_a_conversation_keeps_it_and_its_runs_events(trio, as_app_role):
    rows = make_rows(trio.acme)
    held_run = Run.objects.create(
        tenant=trio.acme, status="succeeded", correlation_id="h",
        conversation=rows.old_conversation, state={"x": 1},
    )  # fmt: skip
    Run.objects.filter(pk=held_run.pk).update(finished_at=rows.old_run.finished_at)
    RunEvent.objects.create(tenant=trio.acme, run=held_run, seq=1, type="run.started")
    LegalHold.objects.create(tenant=trio.acme, conversation=rows.old_conversation)
    policy(trio.acme, 30)

    as_app_role(tenant_purge, tenant_id=trio.acme.pk)
    assert Message.objects.filter(conversation=rows.old_conversation).count() == 4
    assert Attachment.objects.filter(conversation=rows.old_conversation).count() == 2
    assert all(storages["attachments"].exists(key) for key in rows.old_attachment_keys)
    assert RunEvent.objects.filter(run=held_run).count() == 1
    assert not RunEvent.objects.filter(run=rows.old_run).exists()  # not held: purged


def test_the_platform_default_applies_where_the_tenant_sets_none_and_zero_keeps(
    trio, as_app_role, settings
):
    rows = make_rows(trio.acme)
    settings.RETENTION_RUN_DAYS = 30
    settings.RETENTION_AUDIT_DAYS = 30
    policy(trio.acme, None, audit_days=0)  # runs: the default; audit entries: forever

    purged = as_app_role(tenant_purge, tenant_id=trio.acme.pk)
    assert not RunEvent.objects.filter(run=rows.old_run).exists()
    assert (purged.conversations, purged.attachments, purged.audit_entries) == (0, 0, 0)


def test_the_beat_runs_it_for_every_tenant(trio, as_app_role, settings):
    assert settings.CELERY_BEAT_SCHEDULE["purge-retention"]["task"] == "lifecycle.purge_retention"
    rows = make_rows(trio.acme)
    policy(trio.acme, 30)
    assert as_app_role(purge_retention) == 1  # acme lost some; globex has nothing to lose
    assert not RunEvent.objects.filter(run=rows.old_run).exists()
