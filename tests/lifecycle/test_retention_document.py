"""The configuration document's `retention` section: exported as set, planned, applied through
the same service as the page and REST (audited), a bad value a problem at its path with
nothing changed; a document without it leaves it alone, and holds are never in it."""

from __future__ import annotations

import json

import pytest

from agents.config_document import config_export, config_import, config_plan
from lifecycle.models import LegalHold, RetentionPolicy
from tenancy.models import AuditEntry
from tests.lifecycle.retention_rows import policy

pytestmark = pytest.mark.django_db


def document(**sections) -> str:
    return json.dumps({"version": 1, **sections})


def test_it_is_exported_as_set(trio):
    assert config_export(tenant=trio.acme)["retention"] == {
        "run_days": None, "conversation_days": None, "attachment_days": None, "audit_days": None,
    }  # fmt: skip
    policy(trio.acme, None, run_days=90, audit_days=0)
    exported = config_export(tenant=trio.acme)["retention"]
    assert (exported["run_days"], exported["audit_days"]) == (90, 0)


def test_it_is_planned_applied_and_audited(trio):
    text = document(retention={"run_days": 30, "conversation_days": 365})
    plan = config_plan(tenant=trio.acme, text=text)
    assert [(c.section, c.action) for c in plan.changes] == [("retention", "update")]
    assert plan.changes[0].fields["run_days"] == {"from": None, "to": 30}
    applied = config_import(tenant=trio.acme, text=text)
    assert applied.applied, applied.as_dict()
    stored = RetentionPolicy.objects.get(tenant=trio.acme)
    assert (stored.run_days, stored.conversation_days, stored.audit_days) == (30, 365, None)
    entry = AuditEntry.objects.get(tenant=trio.acme, object_type="lifecycle.retentionpolicy")
    assert entry.changes == {"run_days": [None, 30], "conversation_days": [None, 365]}
    assert config_import(tenant=trio.acme, text=text).changes == []  # the same again
    assert not RetentionPolicy.objects.filter(tenant=trio.globex).exists()


@pytest.mark.parametrize(
    "retention, path",
    [
        ({"run_days": -1}, "retention.run_days"),
        ({"audit_days": 40000}, "retention.audit_days"),
        ({"conversation_days": "a year"}, "retention.conversation_days"),
        ({"legal_hold": False}, "retention.legal_hold"),
    ],
)
def test_a_bad_value_is_a_problem_at_its_path_and_changes_nothing(trio, retention, path):
    policy(trio.acme, 10)
    plan = config_import(tenant=trio.acme, text=document(retention=retention))
    assert not plan.applied and [p.path for p in plan.problems] == [path]
    assert RetentionPolicy.objects.get(tenant=trio.acme).run_days == 10


def test_a_document_without_it_or_pruning_leaves_it_and_holds_alone(trio):
    policy(trio.acme, 10, legal_hold=True)
    plan = config_import(tenant=trio.acme, text=document(), prune=True)
    assert not [c for c in plan.changes if c.section == "retention"]
    stored = RetentionPolicy.objects.get(tenant=trio.acme)
    assert (stored.run_days, stored.legal_hold) == (10, True)
    config_import(tenant=trio.acme, text=document(retention={"run_days": 5}))
    assert RetentionPolicy.objects.get(tenant=trio.acme).legal_hold is True
    assert not LegalHold.objects.exists()
