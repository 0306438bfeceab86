from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from tenancy import services
from tenancy.api_keys import find_usable_key, keys_version
from tenancy.models import ApiKey, AuditAction, AuditEntry, Membership, Role
from tenancy.policy import Action, Principal
from tests.factories import add_member, login, make_user


def whoami(client, key: str):
    return client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {key}")


def test_key_is_stored_hashed_and_never_in_any_column(trio):
    key, full = services.api_key_create(tenant=trio.acme, name="ci", scopes=["read"])
    assert full.startswith(f"ap_{key.prefix}_")
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tenancy_apikey WHERE id = %s", [key.pk])
        row = cursor.fetchone()
    secret = full.split("_", 2)[2]
    assert not any(isinstance(v, str) and secret in v for v in row)
    assert not hasattr(key, "full_key")


def test_a_key_authenticates_as_its_tenant_with_its_scopes(client, trio):
    _, full = services.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    response = whoami(client, full)
    assert response.status_code == 200
    assert response.json() == {
        "kind": "api_key",
        "tenant": {"slug": "acme", "name": "Acme"},
        "key": {"name": "ci", "prefix": full.split("_")[1], "scopes": ["read", "run"]},
    }


def test_prefix_lookup_is_one_query(trio, django_assert_num_queries):
    key, full = services.api_key_create(tenant=trio.acme, name="ci", scopes=["read"])
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    with django_assert_num_queries(1):
        assert find_usable_key(full).pk == key.pk


@pytest.mark.parametrize(
    "mangle",
    [
        lambda k: k[:-1] + ("A" if k[-1] != "A" else "B"),  # right prefix, wrong secret
        lambda k: "ap_000000000000_" + k.split("_", 2)[2],  # unknown prefix
        lambda k: "not-a-key",
        lambda k: "",
    ],
)
def test_wrong_keys_are_refused_with_401(client, trio, mangle):
    _, full = services.api_key_create(tenant=trio.acme, name="ci", scopes=["read"])
    response = whoami(client, mangle(full))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_revoked_expired_and_inactive_tenant_keys_are_refused(client, trio):
    revoked, revoked_full = services.api_key_create(tenant=trio.acme, name="a", scopes=["read"])
    services.api_key_revoke(key=revoked)
    expiring, expiring_full = services.api_key_create(
        tenant=trio.acme, name="b", scopes=["read"], expires_at=timezone.now() + timedelta(hours=1)
    )
    ApiKey.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, globex_full = services.api_key_create(tenant=trio.globex, name="c", scopes=["read"])
    trio.globex.active = False
    trio.globex.save()
    for full in (revoked_full, expiring_full, globex_full):
        assert whoami(client, full).status_code == 401


def test_no_credentials_is_401(client, db):
    assert client.get("/api/v1/whoami").status_code == 401


def test_last_used_is_recorded_at_most_once_a_minute(trio):
    key, full = services.api_key_create(tenant=trio.acme, name="ci", scopes=["read"])
    assert key.last_used_at is None
    first = find_usable_key(full).last_used_at
    assert first is not None
    assert find_usable_key(full).last_used_at == first
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=first - timedelta(minutes=5))
    assert find_usable_key(full).last_used_at > first - timedelta(minutes=5)


def test_bad_scopes_or_past_expiry_are_refused(trio):
    with pytest.raises(ValidationError):
        services.api_key_create(tenant=trio.acme, name="x", scopes=["root"])
    with pytest.raises(ValidationError):
        services.api_key_create(tenant=trio.acme, name="x", scopes=[])
    with pytest.raises(ValidationError):
        services.api_key_create(
            tenant=trio.acme, name="x", scopes=["read"], expires_at=timezone.now()
        )
    assert ApiKey.objects.count() == 0


def test_admin_scope_implies_the_others(trio):
    key, _ = services.api_key_create(tenant=trio.acme, name="x", scopes=["admin"])
    assert key.has_scope("run") and key.has_scope("write")
    key, _ = services.api_key_create(tenant=trio.acme, name="y", scopes=["read"])
    assert not key.has_scope("run")


def test_a_key_without_the_needed_scope_gets_403(client, trio):
    _, full = services.api_key_create(tenant=trio.acme, name="runner", scopes=["run"])
    response = whoami(client, full)
    assert response.status_code == 403
    body = response.json()
    assert body["error"]["code"] == "permission_denied"
    assert "lacks the 'read' scope" in body["error"]["message"]


# -- a key follows its creator ----------------------------------------------------------------
@pytest.fixture
def dana(trio):
    """An admin of acme (not its owner)."""
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    return dana


def test_a_keys_role_is_capped_at_its_creators_current_role(trio, dana):
    _, full = services.api_key_create(
        tenant=trio.acme, name="ci", scopes=["admin"], created_by=dana
    )
    assert find_usable_key(full).effective_role == Role.ADMIN  # verified, and remembered
    services.membership_set(tenant=trio.acme, user=dana, role=Role.VIEWER)
    assert find_usable_key(full).effective_role == Role.VIEWER
    assert Principal.of_key(find_usable_key(full)).role == Role.VIEWER
    services.membership_set(tenant=trio.acme, user=dana, role=Role.OWNER)
    assert find_usable_key(full).effective_role == Role.ADMIN  # never beyond its own cap


def test_a_member_who_is_gone_or_inactive_leaves_an_unusable_key(trio, dana):
    key, full = services.api_key_create(
        tenant=trio.acme, name="ci", scopes=["read"], created_by=dana
    )
    assert find_usable_key(full) is not None
    dana.is_active = False
    dana.save()
    assert find_usable_key(full) is None
    dana.is_active = True
    dana.save()
    assert find_usable_key(full) is not None
    # A membership deleted around the services: the key stops all the same.
    Membership.objects.filter(tenant=trio.acme, user=dana).delete()
    assert find_usable_key(full) is None
    key.refresh_from_db()
    assert not key.is_usable and key.effective_role is None
    assert not Principal.of_key(key).may(Action.READ_CONFIG)  # loaded otherwise: no power


def test_a_superuser_who_is_no_member_makes_keys_acting_as_owner_until_demoted(trio):
    root = make_user("root", is_superuser=True)
    _, full = services.api_key_create(
        tenant=trio.acme, name="ops", scopes=["admin"], created_by=root
    )
    assert find_usable_key(full).effective_role == Role.OWNER
    root.is_superuser = False
    root.save(update_fields=["is_superuser"])
    assert find_usable_key(full) is None


def test_operator_keys_act_with_their_own_role_whatever_members_do(trio):
    key, full = services.api_key_create(tenant=trio.acme, name="ops", scopes=["admin"])
    made, made_full = services.api_key_create(
        tenant=trio.acme, name="child", scopes=["read"], made_by_key=find_usable_key(full)
    )
    assert (made.created_by, made.created_by_key) == (None, key)
    services.membership_set(tenant=trio.acme, user=trio.bob, role=Role.VIEWER)
    services.membership_remove(membership=Membership.objects.get(user=trio.bob))
    for full_key in (full, made_full):
        found = find_usable_key(full_key)
        assert found.effective_role == Principal.of_key(found).role == Role.OWNER
    assert (key.made_by, made.made_by) == ("operator", "key ops")


def test_a_key_made_by_a_key_records_its_maker_and_follows_the_person_behind_it(trio, dana):
    maker, maker_full = services.api_key_create(
        tenant=trio.acme, name="maker", scopes=["admin"], created_by=dana
    )
    made, made_full = services.api_key_create(
        tenant=trio.acme, name="made", scopes=["admin"], made_by_key=find_usable_key(maker_full)
    )
    made = ApiKey.objects.select_related("created_by", "created_by_key").get(pk=made.pk)
    assert (made.created_by, made.created_by_key, made.role) == (dana, maker, Role.ADMIN)
    assert made.made_by == "key maker (dana)"
    entry = AuditEntry.objects.get(action=AuditAction.API_KEY_CREATED, object_id=str(made.pk))
    assert entry.api_key == maker and entry.details["made_by_key"] == maker.pk
    services.membership_set(tenant=trio.acme, user=dana, role=Role.MEMBER)
    assert find_usable_key(made_full).effective_role == Role.MEMBER
    # A maker demoted since makes keys of its role now, no more.
    third, _ = services.api_key_create(
        tenant=trio.acme, name="third", scopes=["read"], made_by_key=find_usable_key(made_full)
    )
    assert third.role == Role.MEMBER


def test_removing_a_member_revokes_their_keys_here_in_one_entry(trio, dana):
    mine, mine_full = services.api_key_create(
        tenant=trio.acme, name="mine", scopes=["admin"], created_by=dana
    )
    child, child_full = services.api_key_create(
        tenant=trio.acme, name="child", scopes=["read"], made_by_key=find_usable_key(mine_full)
    )
    add_member(trio.globex, dana, Role.ADMIN)
    _, elsewhere = services.api_key_create(
        tenant=trio.globex, name="g", scopes=["read"], created_by=dana
    )
    _, bobs = services.api_key_create(
        tenant=trio.acme, name="bobs", scopes=["read"], created_by=trio.bob
    )
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    revoked = services.membership_remove(membership=membership)
    assert {key.pk for key in revoked} == {mine.pk, child.pk}
    assert find_usable_key(mine_full) is None and find_usable_key(child_full) is None
    assert find_usable_key(elsewhere) is not None and find_usable_key(bobs) is not None
    (entry,) = AuditEntry.objects.filter(tenant=trio.acme).exclude(
        action__in=[AuditAction.API_KEY_CREATED, AuditAction.MEMBER_ADDED]
    )
    assert entry.action == AuditAction.MEMBER_REMOVED
    assert sorted(k["name"] for k in entry.details["revoked_api_keys"]) == ["child", "mine"]
    assert {k["prefix"] for k in entry.details["revoked_api_keys"]} == {
        mine.prefix,
        child.prefix,
    }


def test_deleting_an_account_revokes_its_keys_rather_than_orphan_them(trio, dana):
    key, full = services.api_key_create(
        tenant=trio.acme, name="ci", scopes=["admin"], created_by=dana
    )
    dana.delete()
    key.refresh_from_db()
    assert key.revoked_at is not None and key.created_by is None
    assert find_usable_key(full) is None
    entry = AuditEntry.objects.get(action=AuditAction.API_KEY_REVOKED, object_id=str(key.pk))
    assert entry.details["reason"] == "its creator's account was deleted"


def test_a_sign_in_leaves_the_verified_keys_alone(client, trio):
    """Only what a key's role reads of an account (active, superuser) moves the keys
    version: a sign-in (last_login) does not make every process look its keys up again."""
    before = keys_version()
    login(client, trio.bob)
    assert keys_version() == before
    trio.bob.is_active = False
    trio.bob.save(update_fields=["is_active"])
    assert keys_version() != before


def test_a_creators_key_is_still_one_query(trio, dana, django_assert_num_queries):
    key, full = services.api_key_create(
        tenant=trio.acme, name="ci", scopes=["read"], created_by=dana
    )
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    with django_assert_num_queries(1):
        found = find_usable_key(full)
        assert Principal.of_key(found).role == Role.ADMIN


def test_keys_made_with_keys_before_the_maker_was_recorded_get_it_from_the_audit_log(trio, dana):
    migration = importlib.import_module("tenancy.migrations.0014_apikey_created_by_key")
    maker, maker_full = services.api_key_create(
        tenant=trio.acme, name="maker", scopes=["admin"], created_by=dana
    )
    made, _ = services.api_key_create(
        tenant=trio.acme, name="made", scopes=["admin"], made_by_key=find_usable_key(maker_full)
    )
    operators, _ = services.api_key_create(tenant=trio.acme, name="ops", scopes=["read"])
    # As such keys were stored before: no creator, no maker.
    ApiKey.objects.filter(pk=made.pk).update(created_by=None, created_by_key=None)
    migration.makers_from_the_audit_log(django_apps, None)
    made.refresh_from_db()
    operators.refresh_from_db()
    assert (made.created_by, made.created_by_key) == (dana, maker)
    assert (operators.created_by, operators.created_by_key) == (None, None)
