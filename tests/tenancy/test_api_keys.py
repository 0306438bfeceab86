from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from agentplatform.tenancy import services
from agentplatform.tenancy.api_keys import find_usable_key
from agentplatform.tenancy.models import ApiKey


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
