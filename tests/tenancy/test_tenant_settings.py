"""The tenant's own settings (tenancy.services._tenant_setting_set): each changed alone on
the locked row, so a stale copy never overwrites a concurrent change; passwords turned off
and the last identity provider removed at once cannot both pass; the admin changes them
through the same services, audited."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, connections
from django.test import Client

from tenancy import services as tenancy
from tenancy.models import AuditEntry, IdentityProvider, Role, Tenant
from tenancy.policy import Principal
from tenancy.sign_on import identity_providers, sso


def _changes(tenant: Tenant, name: str) -> list:
    entries = AuditEntry.objects.filter(tenant=tenant).order_by("pk")
    return [e.changes[name] for e in entries if name in (e.changes or {})]


@pytest.mark.django_db
def test_a_setting_changed_from_a_stale_copy_keeps_the_others(trio):
    stale = Tenant.objects.get(pk=trio.acme.pk)  # a request's tenant, loaded first
    Tenant.objects.filter(pk=trio.acme.pk).update(active=False, name="Acme Renamed")

    tenancy.tenant_time_zone_set(tenant=stale, time_zone="Europe/Lisbon")
    tenancy.tenant_policy_set(tenant=stale, require_confirmation_for_writes=True)

    stored = Tenant.objects.get(pk=trio.acme.pk)
    assert (stored.time_zone, stored.require_confirmation_for_writes) == ("Europe/Lisbon", True)
    assert (stored.active, stored.name) == (False, "Acme Renamed")  # not written back
    assert stale.time_zone == "Europe/Lisbon"
    assert _changes(trio.acme, "time_zone") == [["UTC", "Europe/Lisbon"]]
    assert _changes(trio.acme, "require_confirmation_for_writes") == [[False, True]]

    with pytest.raises(ValidationError) as refused:
        tenancy.tenant_time_zone_set(tenant=stale, time_zone="../../etc/passwd")
    assert "time_zone" in refused.value.message_dict
    assert stale.time_zone == Tenant.objects.get(pk=trio.acme.pk).time_zone == "Europe/Lisbon"


def _waiting_for_a_lock(timeout_s: float = 10) -> bool:
    """Whether another connection is waiting for a row lock, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    with connections["default"].cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.05)
    return False


@pytest.mark.django_db(transaction=True)
def test_passwords_off_and_the_last_provider_removed_at_once_cannot_both_pass(trio, monkeypatch):
    provider = IdentityProvider.objects.create(
        tenant=trio.acme, slug="acme-sso", name="Acme", issuer="https://acme.example",
        client_id="c", default_role=Role.MEMBER,
    )  # fmt: skip
    checked = identity_providers.check_still_served
    outcome: list = []
    waited: list = []

    def passwords_off():  # another request, while the removal's transaction is open
        try:
            tenancy.tenant_sign_in_set(
                tenant=Tenant.objects.get(pk=trio.acme.pk), password_sign_in=False
            )
            outcome.append("turned off")
        except ValidationError as error:
            outcome.append(error.code)
        except Exception as error:  # (said by the assertions below, not lost in the thread)
            outcome.append(f"raised {error!r}")
        finally:
            connection.close()

    other = threading.Thread(target=passwords_off)

    def check_then_race(*, provider):
        checked(provider=provider)  # passes (passwords on) and holds the tenant row
        other.start()
        waited.append(_waiting_for_a_lock())  # the other request waits for the row

    monkeypatch.setattr(identity_providers, "check_still_served", check_then_race)
    owner = Principal(tenant=trio.acme, role=Role.OWNER, user=trio.alice)
    identity_providers.identity_provider_delete(by=owner, provider=provider)
    other.join(30)

    assert waited == [True], outcome
    assert outcome == ["no_identity_provider"]  # it saw the removal, once committed
    tenant = Tenant.objects.get(pk=trio.acme.pk)
    assert tenant.password_sign_in and not sso.providers_serving(tenant)


@pytest.mark.django_db
def test_the_admin_changes_settings_through_the_services(trio):
    client = Client()
    client.force_login(trio.alice)  # acme's owner
    form = {
        "name": "Acme", "time_zone": "Europe/Lisbon", "password_sign_in": "on",
        "require_confirmation_for_writes": "on",
    }  # fmt: skip
    response = client.post(f"/admin/tenancy/tenant/{trio.acme.pk}/change/", form)
    assert response.status_code == 302
    trio.acme.refresh_from_db()
    assert (trio.acme.time_zone, trio.acme.require_confirmation_for_writes) == (
        "Europe/Lisbon",
        True,
    )
    assert _changes(trio.acme, "time_zone") == [["UTC", "Europe/Lisbon"]]
    assert _changes(trio.acme, "require_confirmation_for_writes") == [[False, True]]
    [entry] = AuditEntry.objects.filter(tenant=trio.acme, changes__has_key="time_zone")
    assert entry.user == trio.alice
