"""Tool definition services: validated saves, conflicts, tenant checks, registry refresh."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404

from agentplatform.saving import SaveConflict
from tools.loader import registry_for_tenant
from tools.models import ToolDefinition
from tools.services import tool_definition_delete, tool_definition_save

pytestmark = pytest.mark.django_db

CALC = {"name": "calc", "kind": "builtin", "config": {"builtin": "calculator"}}


def test_save_creates_for_the_tenant_updates_and_refreshes_the_registry(trio):
    definition = tool_definition_save(
        tenant=trio.acme, changes={**CALC, "description": "Company calculator"}
    )
    assert definition.tenant_id == trio.acme.pk and definition.version == 1
    assert registry_for_tenant(trio.acme).get("calc").description == "Company calculator"
    tool_definition_save(
        tenant=trio.acme, definition=definition, changes={"description": "Renamed"}
    )
    definition.refresh_from_db()
    assert definition.description == "Renamed" and definition.version == 2
    assert registry_for_tenant(trio.acme).get("calc").description == "Renamed"
    assert not registry_for_tenant(trio.globex).has("calc")


def test_invalid_data_is_a_validation_error_and_nothing_is_written(trio):
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(tenant=trio.acme, changes={**CALC, "timeout_s": 0})
    assert "timeout_s" in caught.value.message_dict
    assert not ToolDefinition.objects.exists()
    definition = tool_definition_save(tenant=trio.acme, changes=CALC)
    with pytest.raises(ValidationError):
        tool_definition_save(tenant=trio.acme, definition=definition, changes={"timeout_s": -1})
    definition.refresh_from_db()
    assert definition.timeout_s == 30.0 and definition.version == 1


def test_a_duplicate_name_raced_past_validation_is_a_conflict(trio, monkeypatch):
    tool_definition_save(tenant=trio.acme, changes=CALC)
    with pytest.raises(ValidationError):  # a duplicate full_clean sees: 400, as before
        tool_definition_save(tenant=trio.acme, changes=CALC)
    monkeypatch.setattr(
        ToolDefinition, "validate_constraints", lambda self, exclude=None: None
    )  # the other row arrives after validation
    with pytest.raises(SaveConflict, match="retry"):
        tool_definition_save(tenant=trio.acme, changes=CALC)
    assert ToolDefinition.objects.count() == 1


def test_another_tenants_definition_is_not_found_and_unchanged(trio):
    theirs = tool_definition_save(tenant=trio.globex, changes=CALC)
    with pytest.raises(Http404):
        tool_definition_save(tenant=trio.acme, definition=theirs, changes={"enabled": False})
    with pytest.raises(Http404):
        tool_definition_delete(tenant=trio.acme, definition=theirs)
    theirs.refresh_from_db()
    assert theirs.enabled and theirs.version == 1


def test_delete_brings_back_the_builtin(trio):
    hide = tool_definition_save(
        tenant=trio.acme,
        changes={"name": "think", "kind": "builtin", "config": {"builtin": "think"}},
    )
    tool_definition_save(tenant=trio.acme, definition=hide, changes={"enabled": False})
    assert not registry_for_tenant(trio.acme).has("think")
    tool_definition_delete(tenant=trio.acme, definition=hide)
    assert not ToolDefinition.objects.exists()
    assert registry_for_tenant(trio.acme).has("think")
