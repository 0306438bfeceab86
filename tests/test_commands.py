from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from tenancy.models import ApiKey, Membership, Role, Tenant
from tests.factories import make_user


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_create_tenant_creates_the_owner_with_a_password_shown_once():
    out, _ = run("create_tenant", "acme", "--name", "Acme Inc", "--owner", "alice")
    tenant = Tenant.objects.get(slug="acme")
    alice = get_user_model().objects.get(username="alice")
    assert tenant.name == "Acme Inc"
    assert Membership.objects.get(tenant=tenant, user=alice).role == Role.OWNER
    password = out.split("password (shown once): ")[1].strip()
    assert alice.check_password(password) and alice.is_staff


@pytest.mark.django_db
def test_create_tenant_reuses_an_existing_user_and_refuses_duplicates_and_bad_slugs():
    make_user("alice")
    out, _ = run("create_tenant", "acme", "--owner", "alice")
    assert "password" not in out
    with pytest.raises(CommandError, match="already exists"):
        run("create_tenant", "acme", "--owner", "alice")
    with pytest.raises(CommandError, match="lowercase"):
        run("create_tenant", "Bad_Slug", "--owner", "bob")
    assert not get_user_model().objects.filter(username="bob").exists()  # nothing half-made


def test_create_api_key_prints_a_working_key_once(client, trio):
    out, err = run("create_api_key", "acme", "--name", "ci", "--scopes", "read,run")
    full = out.strip()
    assert "shown once" in err
    key = ApiKey.objects.get(name="ci")
    assert key.scopes == ["read", "run"] and full.startswith(f"ap_{key.prefix}_")
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {full}")
    assert response.json()["tenant"]["slug"] == "acme"


def test_create_api_key_refuses_unknown_tenants_and_scopes(trio):
    with pytest.raises(CommandError, match="No tenant"):
        run("create_api_key", "nope", "--name", "ci")
    with pytest.raises(CommandError, match="Unknown scopes: sudo"):
        run("create_api_key", "acme", "--name", "ci", "--scopes", "read,sudo")
    assert ApiKey.objects.count() == 0


@pytest.mark.django_db
def test_models_and_migrations_agree():
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=err)
    except SystemExit:
        pytest.fail(f"models and migrations differ:\n{out.getvalue()}{err.getvalue()}")
    assert "No changes detected" in out.getvalue()
