"""/api/v1/retention: an admin's read and change of the tenant's retention, its legal holds;
bad values refused by field with nothing saved; other tenants' conversations a 404; audited."""

from __future__ import annotations

import pytest

from agents.models import Conversation
from lifecycle.models import LegalHold, RetentionPolicy
from tenancy.models import AuditAction, AuditEntry
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login

pytestmark = pytest.mark.django_db


def test_admins_read_and_change_it_members_and_narrow_keys_get_403(client, trio):
    for scopes in (("read",), ("read", "write", "run", "config")):
        assert_error(as_key(client, trio.acme, *scopes).get("/retention"), 403)
    login(client, trio.bob)  # a member
    assert_error(Api(client, tenant_header="acme").get("/retention"), 403)
    assert_error(Api(client, tenant_header="acme").patch("/retention", {"run_days": 1}), 403)
    login(client, trio.charlie)  # another tenant's owner
    assert_error(Api(client, tenant_header="acme").get("/retention"), 404)
    login(client, trio.alice)
    shown = Api(client, tenant_header="acme").get("/retention").json()
    assert shown["run_days"] is None and shown["in_effect"]["run_days"] is None
    assert shown["held_conversations"] == [] and shown["legal_hold"] is False


def test_a_change_is_saved_shown_in_effect_and_audited(client, trio, settings):
    settings.RETENTION_AUDIT_DAYS = 400
    api = as_key(client, trio.acme, "admin")
    response = api.patch("/retention", {"run_days": 90, "conversation_days": 0})
    assert response.status_code == 200, response.content
    shown = response.json()
    assert (shown["run_days"], shown["conversation_days"], shown["audit_days"]) == (90, 0, None)
    assert shown["in_effect"] == {
        "run_days": 90, "conversation_days": None, "attachment_days": None, "audit_days": 400,
    }  # fmt: skip
    entry = AuditEntry.objects.filter(tenant=trio.acme, object_type="lifecycle.retentionpolicy")
    assert entry.get().changes == {"run_days": [None, 90], "conversation_days": [None, 0]}
    # Fields left out keep their value.
    assert api.patch("/retention", {"audit_days": 10}).json()["run_days"] == 90


@pytest.mark.parametrize(
    "body, field",
    [
        ({"run_days": -1}, "run_days"),
        ({"run_days": 36501}, "run_days"),
        ({"conversation_days": "soon"}, "conversation_days"),
        ({"attachment_days": 1.5}, "attachment_days"),
        ({"legal_hold": "maybe"}, "legal_hold"),
        ({"keep_forever": True}, "keep_forever"),
        ({"legal_hold_reason": "x" * 301}, "legal_hold_reason"),
    ],
)
def test_bad_values_are_refused_by_field_and_nothing_is_saved(client, trio, body, field):
    api = as_key(client, trio.acme, "admin")
    error = assert_error(api.patch("/retention", {"run_days": 5, **body}), 400)
    assert field in error["details"]
    assert not RetentionPolicy.objects.filter(tenant=trio.acme).exists()


def test_a_body_that_is_no_object_is_a_400(client, trio):
    api = as_key(client, trio.acme, "admin")
    assert_error(api.patch("/retention", [1, 2]), 400)
    assert_error(api.post("/retention/holds", raw="not json"), 400)


def test_a_conversation_is_held_and_lifted_and_each_is_audited(client, trio):
    conversation = Conversation.objects.create(tenant=trio.acme, owner_user=trio.bob)
    api = as_key(client, trio.acme, "admin")
    placed = api.post("/retention/holds", {"conversation": conversation.pk, "reason": "case 7"})
    assert placed.status_code == 201, placed.content
    assert placed.json()["conversation"] == conversation.pk
    again = api.post("/retention/holds", {"conversation": conversation.pk})
    assert again.status_code == 201 and LegalHold.objects.count() == 1
    shown = api.get("/retention").json()["held_conversations"]
    assert [h["conversation"] for h in shown] == [conversation.pk]
    assert api.delete(f"/retention/holds/{conversation.pk}").status_code == 204
    assert_error(api.delete(f"/retention/holds/{conversation.pk}"), 404)
    actions = AuditEntry.objects.filter(tenant=trio.acme).values_list("action", flat=True)
    assert AuditAction.LEGAL_HOLD_PLACED in actions and AuditAction.LEGAL_HOLD_LIFTED in actions


def test_another_tenants_conversation_cannot_be_held(client, trio):
    theirs = Conversation.objects.create(tenant=trio.globex, owner_user=trio.charlie)
    api = as_key(client, trio.acme, "admin")
    assert_error(api.post("/retention/holds", {"conversation": theirs.pk}), 404)
    assert_error(api.post("/retention/holds", {"conversation": "x"}), 400)
    assert_error(api.delete("/retention/holds/not-a-number"), 404)
    assert not LegalHold.objects.exists()


def test_a_tenant_hold_is_placed_and_lifted_with_its_reason(client, trio):
    api = as_key(client, trio.acme, "admin")
    shown = api.patch("/retention", {"legal_hold": True, "legal_hold_reason": "litigation"})
    assert shown.json()["legal_hold"] is True
    api.patch("/retention", {"legal_hold": False})
    entries = AuditEntry.objects.filter(
        tenant=trio.acme, action__in=[AuditAction.LEGAL_HOLD_PLACED, AuditAction.LEGAL_HOLD_LIFTED]
    ).order_by("pk")
    assert [e.action for e in entries] == ["legal_hold.placed", "legal_hold.lifted"]
    assert entries[0].details == {"scope": "tenant", "reason": "litigation"}
