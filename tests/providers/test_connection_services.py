"""Provider connection services: validated saves, the one default, conflicts, tenants."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404

from providers.models import ProviderConnection
from providers.services import connection_delete, connection_save
from tenancy.records.saving import SaveConflict

pytestmark = pytest.mark.django_db


def offline(name: str, **extra) -> dict:
    return {"name": name, "kind": "offline", **extra}


def defaults(tenant) -> list[str]:
    return list(
        ProviderConnection.objects.filter(tenant=tenant, is_default=True).values_list(
            "name", flat=True
        )
    )


def test_save_creates_for_the_tenant_and_updates(trio):
    connection = connection_save(
        tenant=trio.acme, changes={"name": "Main", "kind": "openai", "api_key": "sk-1"}
    )
    assert connection.tenant_id == trio.acme.pk
    connection_save(tenant=trio.acme, connection=connection, changes={"default_model": "m"})
    connection.refresh_from_db()
    assert connection.default_model == "m" and connection.api_key == "sk-1"


def test_a_new_default_unsets_the_previous_one(trio):
    first = connection_save(tenant=trio.acme, changes=offline("First", is_default=True))
    theirs = connection_save(tenant=trio.globex, changes=offline("Theirs", is_default=True))
    connection_save(tenant=trio.acme, changes=offline("Second", is_default=True))
    assert defaults(trio.acme) == ["Second"]
    assert defaults(trio.globex) == ["Theirs"]  # another tenant's default is untouched
    connection_save(tenant=trio.acme, connection=first, changes={"is_default": True})
    assert defaults(trio.acme) == ["First"]
    connection_save(tenant=trio.acme, connection=first, changes={})
    assert defaults(trio.acme) == ["First"]  # saving the default again keeps it
    theirs.refresh_from_db()
    assert theirs.is_default


def test_invalid_data_writes_nothing_not_even_the_default_handoff(trio):
    connection_save(tenant=trio.acme, changes=offline("Old", is_default=True))
    with pytest.raises(ValidationError) as caught:
        connection_save(
            tenant=trio.acme, changes={"name": "New", "kind": "openai", "is_default": True}
        )  # no API key
    assert "api_key" in caught.value.message_dict
    assert defaults(trio.acme) == ["Old"]
    assert ProviderConnection.objects.count() == 1


def test_a_duplicate_name_raced_past_validation_is_a_conflict(trio, monkeypatch):
    connection_save(tenant=trio.acme, changes=offline("Same"))
    with pytest.raises(ValidationError):  # a duplicate full_clean sees: 400, as before
        connection_save(tenant=trio.acme, changes=offline("Same"))
    monkeypatch.setattr(ProviderConnection, "validate_constraints", lambda self, exclude=None: None)
    with pytest.raises(SaveConflict):
        connection_save(tenant=trio.acme, changes=offline("Same"))
    assert ProviderConnection.objects.count() == 1


def test_another_tenants_connection_is_not_found_and_unchanged(trio):
    theirs = connection_save(tenant=trio.globex, changes=offline("Theirs", is_default=True))
    mine = connection_save(tenant=trio.acme, changes=offline("Mine", is_default=True))
    with pytest.raises(Http404):
        connection_save(tenant=trio.acme, connection=theirs, changes={"name": "Taken"})
    with pytest.raises(Http404):
        connection_delete(tenant=trio.acme, connection=theirs)
    theirs.refresh_from_db()
    assert theirs.name == "Theirs" and theirs.is_default
    assert defaults(trio.acme) == ["Mine"]
    connection_delete(tenant=trio.acme, connection=mine)
    assert list(ProviderConnection.objects.values_list("name", flat=True)) == ["Theirs"]
