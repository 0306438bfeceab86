"""`/api/v1/identity-providers`: a tenant's owners and admins manage its own identity
providers and their group rules; the client secret is write-only and encrypted, every write
is in the audit log with the secret masked, bad input is a 400 naming the field, other
tenants' and platform-wide providers answer 404, and a provider giving the owner role is
an owner's alone."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tenancy import rls
from tenancy import services as tenancy
from tenancy.models import (
    AuditEntry,
    IdentityProvider,
    IdentityProviderGroup,
    Membership,
    Role,
)
from tenancy.sign_on import sso
from tests.api.test_runs_api import client_for
from tests.factories import add_member, make_user

pytestmark = pytest.mark.django_db
URL = "/api/v1/identity-providers"
SECRET = "idp-client-secret-never-shown"
BODY = {
    "slug": "acme-entra",
    "name": "Acme Entra ID",
    "issuer": "https://login.acme.example/v2.0",
    "client_id": "platform",
    "client_secret": SECRET,
    "groups_claim": "groups",
    "rules": [{"group": "eng", "role": "member"}, {"group": "leads", "role": "admin"}],
}


def session(user, tenant: str = "acme") -> APIClient:
    client = APIClient()
    client.force_login(user)
    client.credentials(HTTP_X_TENANT=tenant)
    return client


@pytest.fixture
def dana(trio):
    """acme's admin (not an owner)."""
    user = make_user("dana")
    add_member(trio.acme, user, Role.ADMIN)
    return user


def provider_of(tenant, slug: str = "stored", **fields) -> IdentityProvider:
    row = IdentityProvider.objects.create(
        tenant=tenant,
        slug=slug,
        name=slug.title(),
        issuer=f"https://{slug}.example",
        client_id="c",
        client_secret=SECRET,
        **fields,
    )
    if tenant is not None:
        IdentityProviderGroup.objects.create(provider=row, group="staff", tenant=tenant)
    return row


def audit_text(tenant) -> str:
    entries = AuditEntry.objects.filter(tenant=tenant).values("changes", "details", "object_repr")
    return json.dumps(list(entries), default=str)


# -- the whole round ---------------------------------------------------------------------------
def test_an_admin_creates_reads_changes_and_deletes_a_provider(trio, dana):
    client = session(dana)
    bodies = []
    created = client.post(URL, BODY, format="json")
    assert created.status_code == 201, created.json()
    bodies.append(created.content.decode())
    made = created.json()
    assert made["client_secret_set"] is True and "client_secret" not in made
    assert made["rules"] == [
        {"group": "eng", "role": "member"},
        {"group": "leads", "role": "admin"},
    ]
    assert made["sign_in_url"] == "http://testserver/sso/acme-entra/"
    url = f"{URL}/{made['id']}"

    # stored as the admin stores it: encrypted at rest, usable by sign-in
    row = IdentityProvider.objects.get(pk=made["id"])
    assert row.tenant_id == trio.acme.pk and row.client_secret == SECRET
    with rls.owner(), connection.cursor() as cursor:
        cursor.execute("SELECT client_secret FROM tenancy_identityprovider WHERE id = %s", [row.pk])
        assert SECRET not in cursor.fetchone()[0]
    (served,) = sso.providers_serving(trio.acme)
    assert served.slug == "acme-entra" and served.client_secret == SECRET
    assert {rule.group: rule.role for rule in served.rules} == {"eng": "member", "leads": "admin"}

    listed = client.get(URL)
    assert [p["slug"] for p in listed.json()["results"]] == ["acme-entra"]
    bodies += [listed.content.decode(), client.get(url).content.decode()]

    changed = client.patch(
        url,
        {"name": "Entra", "rules": [{"group": "eng", "role": "viewer"}], "client_secret": "new"},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    bodies.append(changed.content.decode())
    assert changed.json()["rules"] == [{"group": "eng", "role": "viewer"}]
    assert IdentityProvider.objects.get(pk=made["id"]).client_secret == "new"
    kept = client.patch(url, {"enabled": False}, format="json").json()
    assert kept["client_secret_set"] is True and kept["rules"] == changed.json()["rules"]
    cleared = client.patch(url, {"client_secret": None}, format="json").json()
    assert cleared["client_secret_set"] is False
    assert IdentityProvider.objects.get(pk=made["id"]).client_secret in (None, "")

    assert client.delete(url).status_code == 204
    assert not IdentityProvider.objects.filter(pk=made["id"]).exists()
    assert not IdentityProviderGroup.objects.filter(provider_id=made["id"]).exists()
    assert client.get(url).status_code == 404
    for body in bodies:
        assert SECRET not in body and "new" not in json.loads(body).get("client_secret", "")

    # the audit log: the provider and each rule, who acted, the secret masked
    entries = AuditEntry.objects.filter(tenant=trio.acme).order_by("id")
    provider_entries = [e for e in entries if e.object_type == "tenancy.identityprovider"]
    assert [e.action for e in provider_entries] == [
        "config.created", "config.changed", "config.changed", "config.changed", "config.deleted",
    ]  # fmt: skip
    assert provider_entries[0].changes["client_secret"] == [None, "[set]"]
    assert provider_entries[1].changes["client_secret"] == ["[set]", "[changed]"]
    assert provider_entries[3].changes["client_secret"] == ["[set]", "[cleared]"]
    assert all(
        e.user_id == dana.pk for e in entries if e.object_type.startswith("tenancy.identity")
    )
    rule_actions = [e.action for e in entries if e.object_type == "tenancy.identityprovidergroup"]
    assert sorted(rule_actions) == sorted(
        ["config.created", "config.created", "config.deleted", "config.changed", "config.deleted"]
    )
    text = audit_text(trio.acme)
    assert SECRET not in text and '"new"' not in text


def test_an_admin_scope_key_manages_providers(trio):
    _, key = tenancy.api_key_create(tenant=trio.acme, name="adm", scopes=["admin"])
    client = client_for(key)
    created = client.post(URL, BODY, format="json")
    assert created.status_code == 201, created.json()
    entry = AuditEntry.objects.get(tenant=trio.acme, object_type="tenancy.identityprovider")
    assert entry.api_key is not None and SECRET not in json.dumps(entry.changes)


def test_a_loopback_http_issuer_is_taken_when_https_is_not_required(trio, dana, settings):
    settings.SSO_REQUIRE_HTTPS = False
    body = {**BODY, "issuer": "http://127.0.0.1:8080/realms/acme"}
    assert session(dana).post(URL, body, format="json").status_code == 201


# -- who may -------------------------------------------------------------------------------
def test_only_owners_admins_and_admin_keys_reach_providers(trio, dana):
    row = provider_of(trio.acme)
    vera = make_user("vera")
    add_member(trio.acme, vera, Role.VIEWER)
    refused = [session(trio.bob), session(vera)]
    for scope in ("read", "write", "run", "config"):
        _, key = tenancy.api_key_create(tenant=trio.acme, name=scope, scopes=[scope])
        refused.append(client_for(key))
    _, members_key = tenancy.api_key_create(
        tenant=trio.acme, name="m", scopes=["admin"], role=Role.MEMBER
    )
    refused.append(client_for(members_key))  # a key never acts beyond its maker's role
    url = f"{URL}/{row.pk}"
    for client in refused:
        assert client.get(URL).status_code == 403
        assert client.get(url).status_code == 403
        assert client.post(URL, BODY, format="json").status_code == 403
        assert client.patch(url, {"name": "x"}, format="json").status_code == 403
        assert client.delete(url).status_code == 403
    outsider = session(trio.charlie)  # a member of globex only, naming acme
    for response in (
        outsider.get(URL),
        outsider.get(url),
        outsider.patch(url, {"name": "x"}, format="json"),
        outsider.delete(url),
    ):
        assert response.status_code == 404
    assert APIClient().get(URL, HTTP_X_TENANT="acme").status_code in (401, 403)
    row.refresh_from_db()
    assert row.name == "Stored" and IdentityProvider.objects.count() == 1
    for allowed in (session(trio.alice), session(dana)):
        assert allowed.get(url).status_code == 200


def test_a_provider_giving_the_owner_role_is_an_owners_alone(trio, dana):
    admin = session(dana)
    owner_rule = {**BODY, "rules": [{"group": "bosses", "role": "owner"}]}
    assert admin.post(URL, owner_rule, format="json").status_code == 403
    default_owner = {**BODY, "rules": [], "default_role": "owner"}
    assert admin.post(URL, default_owner, format="json").status_code == 403
    assert not IdentityProvider.objects.exists()

    made = session(trio.alice).post(URL, owner_rule, format="json")
    assert made.status_code == 201, made.json()
    url = f"{URL}/{made.json()['id']}"
    assert admin.patch(url, {"name": "Mine now"}, format="json").status_code == 403
    assert admin.patch(url, {"rules": []}, format="json").status_code == 403
    assert admin.delete(url).status_code == 403
    assert admin.get(url).status_code == 200  # reading is not changing
    plain = provider_of(trio.acme, "plain")
    promote = {"rules": [{"group": "staff", "role": "owner"}]}
    assert admin.patch(f"{URL}/{plain.pk}", promote, format="json").status_code == 403
    assert not plain.rules.filter(role=Role.OWNER).exists()
    assert session(trio.alice).delete(url).status_code == 204


# -- other tenants and the platform's ---------------------------------------------------------
def test_other_tenants_and_platform_wide_providers_answer_404(trio, dana):
    theirs = provider_of(trio.globex, "globex-idp")
    platform = provider_of(None, "corp")
    client = session(dana)
    for row in (theirs, platform):
        url = f"{URL}/{row.pk}"
        assert client.get(url).status_code == 404
        assert client.patch(url, {"name": "taken"}, format="json").status_code == 404
        assert client.put(url, {**BODY, "slug": row.slug}, format="json").status_code == 404
        assert client.delete(url).status_code == 404
    assert client.get(URL).json()["results"] == []
    assert client.get(f"{URL}/abc").status_code == 404
    assert client.get(f"{URL}/99999999999999999999999").status_code == 404
    _, globex_key = tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["admin"])
    acme_row = provider_of(trio.acme)
    assert client_for(globex_key).get(f"{URL}/{acme_row.pk}").status_code == 404
    assert client_for(globex_key).delete(f"{URL}/{acme_row.pk}").status_code == 404
    for row in (theirs, platform, acme_row):
        row.refresh_from_db()
        assert row.name in ("Globex-Idp", "Corp", "Stored") and row.client_secret == SECRET
    assert IdentityProvider.objects.count() == 3


# -- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"issuer": "ftp://login.acme.example"}, "issuer"),
        ({"issuer": "http://login.acme.example"}, "issuer"),  # https is required
        ({"issuer": "not a url"}, "issuer"),
        ({"issuer": "https://login.acme.example/?tenant=x"}, "issuer"),
        ({"issuer": "https://user:pw@login.acme.example"}, "issuer"),
        ({"slug": "Bad Slug"}, "slug"),
        ({"slug": "-leading"}, "slug"),
        ({"slug": "x" * 51}, "slug"),
        ({"slug": ""}, "slug"),
        ({"name": ""}, "name"),
        ({"name": "a\x00b"}, "name"),
        ({"client_id": "c" * 256}, "client_id"),
        ({"default_role": "god"}, "default_role"),
        ({"enabled": "perhaps"}, "enabled"),
        ({"rules": "eng"}, "rules"),
        ({"rules": [{"group": "eng", "role": "god"}]}, "rules"),
        ({"rules": [{"group": "eng", "role": "member", "tenant": 1}]}, "rules"),
        ({"rules": [{"group": "", "role": "member"}]}, "rules"),
        ({"rules": [{"group": "eng", "role": "member"}] * 2}, "rules"),
        ({"rules": [{"group": f"g{n}", "role": "member"} for n in range(201)]}, "rules"),
        ({"tenant": 2}, "tenant"),
        ({"client_secret_plain": "x"}, "client_secret_plain"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(trio, dana, change, field):
    response = session(dana).post(URL, {**BODY, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert SECRET not in response.content.decode()
    assert not IdentityProvider.objects.exists()


def test_required_fields_and_taken_slugs_are_400s(trio, dana, settings):
    client = session(dana)
    missing = client.post(URL, {"slug": "x"}, format="json")
    assert missing.status_code == 400
    assert {"name", "issuer", "client_id"} <= set(missing.json()["error"]["details"])
    provider_of(trio.globex, "acme-entra")  # another tenant's: its slug is in a public URL
    taken = client.post(URL, BODY, format="json")
    assert taken.status_code == 400 and "slug" in taken.json()["error"]["details"]
    settings.SSO_PROVIDERS = [
        {"slug": "corp", "name": "Corp", "issuer": "https://corp.example", "client_id": "c"}
    ]
    clash = client.post(URL, {**BODY, "slug": "corp"}, format="json")
    assert clash.status_code == 400 and "SSO_PROVIDERS" in clash.content.decode()
    assert IdentityProvider.objects.filter(tenant=trio.acme).count() == 0


def test_a_bad_change_leaves_the_provider_as_it_was(trio, dana):
    row = provider_of(trio.acme)
    url = f"{URL}/{row.pk}"
    client = session(dana)
    bad = client.patch(
        url, {"name": "Renamed", "rules": [{"group": "x", "role": "god"}]}, format="json"
    )
    assert bad.status_code == 400
    assert client.patch(url, {"issuer": "javascript:alert(1)"}, format="json").status_code == 400
    row.refresh_from_db()
    assert row.name == "Stored" and row.issuer == "https://stored.example"
    assert list(row.rules.values_list("group", flat=True)) == ["staff"]


def test_the_last_provider_stays_while_passwords_are_off(trio):
    row = provider_of(trio.acme)
    tenancy.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    _, key = tenancy.api_key_create(tenant=trio.acme, name="adm", scopes=["admin"])
    client = client_for(key)  # (dana's password session ends with passwords off)
    url = f"{URL}/{row.pk}"
    disabled = client.patch(url, {"enabled": False}, format="json")
    assert disabled.status_code == 400 and "Turn password sign-in on" in disabled.content.decode()
    assert client.delete(url).status_code == 400
    row.refresh_from_db()
    assert row.enabled and IdentityProvider.objects.filter(pk=row.pk).exists()
    assert client.post(URL, BODY, format="json").status_code == 201  # a second one serves
    assert client.delete(url).status_code == 204


# -- the schema ---------------------------------------------------------------------------
def test_the_schema_documents_the_resource_and_a_write_only_secret(trio):
    client = session(trio.alice)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert {"/api/v1/identity-providers", "/api/v1/identity-providers/{id}"} <= set(schema["paths"])
    operations = schema["paths"]["/api/v1/identity-providers/{id}"]
    assert {"get", "patch", "delete"} <= set(operations)
    components = schema["components"]["schemas"]
    answer, request = components["IdentityProvider"], components["IdentityProviderRequest"]
    assert (
        "client_secret" not in answer["properties"] and "client_secret_set" in answer["properties"]
    )
    assert request["properties"]["client_secret"]["writeOnly"] is True
    assert "client_secret_set" not in request["properties"]


def test_a_slug_is_fixed_and_a_deleted_providers_memberships_stay_unmarked(trio, dana):
    row = provider_of(trio.acme)
    sam = make_user("sam")
    made = add_member(trio.acme, sam, Role.MEMBER)
    Membership.objects.filter(pk=made.pk).update(sso_provider=row.slug)
    client = session(dana)
    renamed = client.patch(f"{URL}/{row.pk}", {"slug": "other"}, format="json")
    assert renamed.status_code == 400 and "slug" in renamed.json()["error"]["details"]
    row.refresh_from_db()
    assert row.slug == "stored"
    assert client.delete(f"{URL}/{row.pk}").status_code == 204
    kept = Membership.objects.get(pk=made.pk)
    assert kept.sso_provider == ""  # a later provider taking the slug never removes it
