"""Single sign-on without a provider process (tenancy/sso.py): which providers exist, groups
to roles, password sign-in turned off per tenant (the form, `authenticate`, the admin, the
members page), and the SSO_PROVIDERS setting's checks. The code flow itself is tested
against a real provider in tests/web/test_sso.py."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.test import Client

from agentplatform import config
from base import rate_counters
from tenancy import services
from tenancy.api_keys import find_usable_key
from tenancy.models import (
    AuditEntry,
    IdentityProvider,
    IdentityProviderGroup,
    Membership,
    Role,
)
from tenancy.sign_in import SIGN_IN_METHOD, _ip_key, _user_key
from tenancy.sign_on import sso
from tests.factories import PASSWORD, add_member, make_user

SECRET = "client-secret-never-shown"


@pytest.fixture(autouse=True)
def fresh_counters():
    keys = [_user_key(n) for n in ("alice", "bob", "charlie", "root")] + [_ip_key("127.0.0.1")]
    for key in keys:
        rate_counters.reset(key)
    yield
    for key in keys:
        rate_counters.reset(key)


def acme_provider(trio, **fields) -> IdentityProvider:
    row = IdentityProvider.objects.create(
        tenant=trio.acme,
        slug="acme-idp",
        name="Acme Login",
        issuer="https://login.acme.example",
        client_id="platform",
        client_secret=SECRET,
        **fields,
    )
    IdentityProviderGroup.objects.create(provider=row, group="staff", tenant=trio.acme)
    return row


def corp_setting(**extra) -> dict:
    return {
        "slug": "corp",
        "name": "Corp SSO",
        "issuer": "https://corp.example",
        "client_id": "platform",
        "groups": [{"group": "eng", "tenant": "globex", "role": "admin"}],
        **extra,
    }


# -- which providers ---------------------------------------------------------------------
def test_the_sign_in_page_offers_platform_providers_and_the_named_tenants(trio, settings):
    acme_provider(trio)
    settings.SSO_PROVIDERS = [corp_setting()]
    plain = Client().get("/login/").content.decode()
    assert "Sign in with Corp SSO" in plain and "Acme Login" not in plain
    for url in ("/login/?tenant=acme", "/login/?next=/t/acme/chat/"):
        page = Client().get(url).content.decode()
        assert "Sign in with Acme Login" in page and "Sign in with Corp SSO" in page, url
    assert "Acme Login" not in Client().get("/login/?tenant=globex").content.decode()
    assert SECRET not in Client().get("/login/?tenant=acme").content.decode()


def test_a_disabled_provider_is_not_offered_nor_started(trio):
    acme_provider(trio, enabled=False)
    assert "Acme Login" not in Client().get("/login/?tenant=acme").content.decode()
    assert Client().get("/sso/acme-idp/").status_code == 404


def test_settings_providers_name_tenants_by_slug(trio, settings):
    settings.SSO_PROVIDERS = [corp_setting(tenant="globex", default_role="viewer")]
    (corp,) = sso.providers(tenant=trio.globex)
    assert corp.tenant_id == trio.globex.pk and corp.default_role == "viewer"
    assert corp.rules == (sso.GroupRule("eng", trio.globex.pk, "admin"),)
    assert sso.providers(tenant=trio.acme) == []
    assert "secret" not in repr(corp)


def test_groups_give_the_highest_role_and_a_default(trio):
    provider = sso.SSOProvider(
        slug="p",
        name="P",
        tenant_id=trio.acme.pk,
        issuer="https://p.example",
        client_id="c",
        client_secret="",
        scopes="openid",
        groups_claim="groups",
        default_role=Role.VIEWER,
        rules=(
            sso.GroupRule("a", trio.acme.pk, Role.MEMBER),
            sso.GroupRule("b", trio.acme.pk, Role.ADMIN),
        ),
    )
    assert sso.roles_from_groups(provider, {"a", "b"}) == {trio.acme.pk: Role.ADMIN}
    assert sso.roles_from_groups(provider, {"x"}) == {trio.acme.pk: Role.VIEWER}
    assert sso.groups_of(provider, {"groups": "a"}) == {"a"}
    assert sso.groups_of(provider, {"groups": {"not": "a list"}}) == set()


def test_a_tenants_own_provider_touches_no_other_tenants_memberships(trio):
    """Even a membership of globex marked with acme's provider's slug (a rule row pointing
    elsewhere, a mark left by an earlier provider) is neither given nor removed by it."""
    row = acme_provider(trio)
    IdentityProviderGroup.objects.create(provider=row, group="ops", tenant=trio.globex)
    provider = sso.provider_named("acme-idp")
    services.membership_set(tenant=trio.globex, user=trio.bob, role=Role.MEMBER)
    Membership.objects.filter(tenant=trio.globex, user=trio.bob).update(sso_provider="acme-idp")
    services.memberships_sync(user=trio.bob, provider=provider, groups={"ops"})
    assert Membership.objects.filter(tenant=trio.globex, user=trio.bob).exists()  # kept
    dave = make_user("dave")
    services.memberships_sync(user=dave, provider=provider, groups={"ops", "staff"})
    assert set(Membership.objects.filter(user=dave).values_list("tenant__slug", flat=True)) == {
        "acme"
    }


def test_a_stored_provider_cannot_take_a_settings_slug(trio, settings):
    settings.SSO_PROVIDERS = [corp_setting()]
    row = IdentityProvider(
        slug="corp", name="x", issuer="https://x.example", client_id="c", tenant=trio.acme
    )
    with pytest.raises(ValidationError, match="already uses this slug"):
        row.full_clean()


def test_a_tenants_rule_must_name_that_tenant(trio):
    row = acme_provider(trio)
    rule = IdentityProviderGroup(provider=row, group="g", tenant=trio.globex, role=Role.OWNER)
    with pytest.raises(ValidationError, match="in that tenant only"):
        rule.full_clean()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{", "not valid JSON"),
        ('{"slug": "x"}', "JSON list"),
        ('[{"slug": "x"}]', "'name' is required"),
        ('[{"slug": "X y", "name": "n", "issuer": "https://i", "client_id": "c"}]', "not a slug"),
        ('[{"slug": "x", "name": "n", "issuer": "file:///etc", "client_id": "c"}]', "http(s)"),
        (
            '[{"slug": "x", "name": "n", "issuer": "https://i", "client_id": "c", "y": 1}]',
            "unknown",
        ),
        (
            '[{"slug": "x", "name": "n", "issuer": "https://i", "client_id": "c", "groups": [1]}]',
            "groups must be",
        ),
        (
            '[{"slug": "x", "name": "n", "issuer": "https://i", "client_id": "c", '
            '"groups": [{"group": "g", "tenant": "t", "role": "god"}]}]',
            "role 'god' is not one of",
        ),
    ],
)
def test_the_setting_fails_loudly(monkeypatch, value, message):
    monkeypatch.setenv("SSO_PROVIDERS", value)
    with pytest.raises(ImproperlyConfigured, match=message.replace("(", r"\(").replace(")", r"\)")):
        config.env_json_sso_providers("SSO_PROVIDERS")


def test_the_setting_parses(monkeypatch):
    monkeypatch.setenv("SSO_PROVIDERS", json.dumps([corp_setting()]))
    assert config.env_json_sso_providers("SSO_PROVIDERS")[0]["slug"] == "corp"


# -- e-mail claims -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("verified", "tenants", "platform"),
    [
        ({"email_verified": True}, True, True),
        ({"email_verified": "true"}, True, True),
        ({}, False, True),  # a platform-wide provider's (the operator's) may say nothing
        ({"email_verified": None}, False, True),
        ({"email_verified": False}, False, False),
        ({"email_verified": "false"}, False, False),
        ({"email_verified": 1}, False, True),
    ],
)
def test_an_email_is_trusted_from_a_tenants_provider_only_when_verified(
    trio, verified, tenants, platform
):
    acme_provider(trio)
    own = sso.provider_named("acme-idp")
    wide = sso.SSOProvider(**{**own.__dict__, "slug": "corp", "tenant_id": None})
    claims = {"email": "victim@corp.example", **verified}
    assert sso.trusted_email(own, claims) == ("victim@corp.example" if tenants else "")
    assert sso.trusted_email(wide, claims) == ("victim@corp.example" if platform else "")


def test_an_untrusted_email_names_no_account(trio):
    """Neither stored nor made the username (the admin finds people by either)."""
    acme_provider(trio)
    provider = sso.provider_named("acme-idp")
    claims = {"iss": provider.issuer, "sub": "e-1", "email": "victim@corp.example"}
    user = sso.user_for_identity(provider=provider, claims=claims)
    assert user.email == "" and user.username == "e-1"
    verified = {"iss": provider.issuer, "sub": "v-1", "email": "vera@acme.example",
                "email_verified": True}  # fmt: skip
    user = sso.user_for_identity(provider=provider, claims=verified)
    assert user.email == "vera@acme.example" and user.username == "vera@acme.example"
    # a later sign-in whose address is unverified keeps the verified one
    sso.user_for_identity(provider=provider, claims={**verified, "email": "x@evil.example",
                                                     "email_verified": False})  # fmt: skip
    user.refresh_from_db()
    assert user.email == "vera@acme.example"


# -- password sign-in off ----------------------------------------------------------------
def post_login(username: str, page: str = "/login/"):
    return Client().post(page, {"username": username, "password": PASSWORD})


def test_turning_passwords_off_needs_an_identity_provider(trio, settings):
    with pytest.raises(ValidationError, match="Add an identity provider"):
        services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    settings.SSO_PROVIDERS = [corp_setting()]  # its rule names globex, not acme
    with pytest.raises(ValidationError):
        services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    services.tenant_sign_in_set(tenant=trio.globex, password_sign_in=False)
    trio.globex.refresh_from_db()
    assert trio.globex.password_sign_in is False
    entry = AuditEntry.objects.get(tenant=trio.globex, action="config.changed")
    assert entry.changes == {"password_sign_in": [True, False]}


def shared_member(trio):
    """bob: a member of acme (passwords off, acme's provider) and of globex (passwords on),
    with no identity at acme's provider; signed in with his password."""
    acme_provider(trio)
    add_member(trio.globex, trio.bob, Role.MEMBER)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    client = Client()
    response = client.post("/login/", {"username": "bob", "password": PASSWORD})
    assert response.status_code == 302  # the password still signs him in
    assert client.session[SIGN_IN_METHOD] == "password"
    return client


def test_a_password_session_is_refused_in_a_tenant_without_passwords_only(trio):
    """The web pages: acme answers 403 with what to do (its single sign-on, or leaving);
    globex, which allows passwords, works, and so does the session itself."""
    bob = shared_member(trio)
    refused = bob.get("/t/acme/chat/")
    assert refused.status_code == 403
    page = refused.content.decode()
    assert "Password sign-in is turned off for Acme. Sign in with your organisation" in page
    assert 'href="/sso/acme-idp/?next=/t/acme/chat/"' in page and "Sign in with Acme Login" in page
    assert 'href="/account/leave/acme/"' in page
    assert SECRET not in page
    assert bob.get("/t/globex/").status_code == 200
    assert bob.get("/t/globex/chat/").status_code == 200
    assert bob.get("/t/acme/").status_code == 403  # again: the session was not ended
    assert bob.get("/account/").status_code == 200


def test_rest_refuses_a_password_session_in_a_tenant_without_passwords_only(trio):
    bob = shared_member(trio)
    refused = bob.get("/api/v1/agents", HTTP_X_TENANT="acme")
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == (
        "Password sign-in is turned off for Acme. Sign in with your organisation's single "
        "sign-on instead."
    )
    assert bob.get("/api/v1/agents?tenant=acme").status_code == 403  # (EventSource's way)
    assert bob.get("/api/v1/agents", HTTP_X_TENANT="globex").status_code == 200
    who = bob.get("/api/v1/whoami")
    assert who.status_code == 200 and who.json()["username"] == "bob"


def test_single_sign_on_sessions_and_superusers_act_in_a_tenant_without_passwords(trio):
    acme_provider(trio)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    jan = Client()
    jan.force_login(trio.bob)
    sso_session(jan)
    assert jan.get("/t/acme/").status_code == 200
    assert jan.get("/api/v1/agents", HTTP_X_TENANT="acme").status_code == 200
    root = make_user("root", is_staff=True, is_superuser=True)
    add_member(trio.acme, root, Role.OWNER)
    operator = Client()
    assert operator.post("/login/", {"username": "root", "password": PASSWORD}).status_code == 302
    assert operator.get("/t/acme/").status_code == 200  # the operator's way back in


def test_the_admin_shows_a_password_session_only_tenants_that_allow_passwords(trio):
    """alice owns acme (passwords off) and administers globex: with her password the admin
    shows globex's rows only; a tenant admin of acme alone is told why at the sign-in."""
    acme_provider(trio)
    add_member(trio.globex, trio.alice, Role.ADMIN)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    alice = Client()
    assert (
        alice.post("/admin/login/", {"username": "alice", "password": PASSWORD}).status_code == 302
    )
    listing = alice.get("/admin/tenancy/tenant/")
    assert listing.status_code == 200
    assert "Globex" in listing.content.decode() and "Acme" not in listing.content.decode()
    assert alice.get(f"/admin/tenancy/tenant/{trio.acme.pk}/change/").status_code == 404
    assert alice.get(f"/admin/tenancy/tenant/{trio.globex.pk}/change/").status_code == 200
    assert alice.get("/admin/tenancy/identityprovider/").status_code == 200
    assert "Acme Login" not in alice.get("/admin/tenancy/identityprovider/").content.decode()

    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)  # (staff: an admin of a tenant)
    refused = Client().post("/admin/login/", {"username": "dana", "password": PASSWORD})
    assert refused.status_code == 200
    assert "Password sign-in is turned off for Acme" in refused.content.decode()
    assert "_auth_user_id" not in refused.wsgi_request.session
    # signed in on /login/ with her password, the admin says the same
    signed_in = Client()
    assert signed_in.post("/login/", {"username": "dana", "password": PASSWORD}).status_code == 302
    page = signed_in.get("/admin/", follow=True)
    assert "Password sign-in is turned off for Acme" in page.content.decode()
    assert page.redirect_chain[-1][0].startswith("/admin/login/")
    # through single sign-on, the admin opens
    sso_session(signed_in)
    assert signed_in.get("/admin/tenancy/tenant/").status_code == 200


def test_api_keys_keep_working_without_passwords(trio):
    acme_provider(trio)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    _, key = services.api_key_create(tenant=trio.acme, name="ci", scopes=["read"])
    response = Client().get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content


def test_a_sign_in_on_the_login_page_is_a_password_session(trio):
    client = Client()
    assert client.post("/login/", {"username": "bob", "password": PASSWORD}).status_code == 302
    assert client.session[SIGN_IN_METHOD] == "password"


def test_a_session_from_before_the_mark_is_a_password_one_unless_its_user_has_none(trio):
    """Sessions signed in before the method was recorded: a user with a usable password
    counts as a password session; one single sign-on made (no usable password) does not."""
    sso_made = make_user("sam")
    sso_made.set_unusable_password()
    sso_made.save()
    add_member(trio.acme, sso_made, Role.MEMBER)
    clients = {}
    for user in (trio.bob, sso_made):
        client = Client()
        client.force_login(user)
        session = client.session
        del session[SIGN_IN_METHOD]
        session.save()
        clients[user.username] = client
    acme_provider(trio)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    assert clients["bob"].get("/t/acme/").status_code == 403
    assert clients["sam"].get("/t/acme/").status_code == 200


def test_turning_passwords_back_on_lets_password_sessions_act_again(trio):
    acme_provider(trio)
    client = Client()
    client.force_login(trio.bob)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    assert client.get("/t/acme/").status_code == 403
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=True)
    assert client.get("/t/acme/").status_code == 200


# -- leaving a tenant ------------------------------------------------------------------------
def test_a_member_leaves_a_tenant_without_passwords_from_their_account_page(trio):
    bob = shared_member(trio)
    account = bob.get("/account/").content.decode()
    assert "Acme" in account and "Globex" in account
    assert "Password sign-in is turned off here" in account
    assert 'href="/account/leave/acme/"' in account
    confirm = bob.get("/account/leave/acme/")
    assert confirm.status_code == 200 and "Leave Acme?" in confirm.content.decode()
    left = bob.post("/account/leave/acme/")
    assert left.status_code == 302 and left["Location"] == "/account/"
    assert not Membership.objects.filter(tenant=trio.acme, user=trio.bob).exists()
    assert Membership.objects.filter(tenant=trio.globex, user=trio.bob).exists()
    entry = AuditEntry.objects.get(tenant=trio.acme, action="member.removed")
    assert entry.user_id == trio.bob.pk
    assert bob.get("/t/acme/").status_code == 404  # no longer a member
    assert bob.get("/t/globex/").status_code == 200


def test_a_member_leaves_from_a_tenant_they_can_act_in(trio):
    bob = Client()
    bob.force_login(trio.bob)
    home = bob.get("/t/acme/").content.decode()
    assert 'href="/account/leave/acme/"' in home
    assert bob.post("/account/leave/acme/").status_code == 302
    assert not Membership.objects.filter(tenant=trio.acme, user=trio.bob).exists()


def test_leaving_keeps_the_last_owner_and_answers_404_to_outsiders(trio):
    alice = Client()
    alice.force_login(trio.alice)
    refused = alice.post("/account/leave/acme/")
    assert refused.status_code == 400
    assert "at least one owner. Make someone else an owner first." in refused.content.decode()
    assert Membership.objects.filter(tenant=trio.acme, user=trio.alice).exists()
    charlie = Client()
    charlie.force_login(trio.charlie)
    assert charlie.post("/account/leave/acme/").status_code == 404
    assert charlie.get("/account/leave/acme/").status_code == 404
    assert Client().post("/account/leave/acme/").status_code == 302  # to the sign-in page
    assert Membership.objects.filter(tenant=trio.acme).count() == 2


# -- the members page and the admin --------------------------------------------------------
URL = "/t/acme/members/sign-in/"


def sso_session(client: Client, slug: str = "acme-idp") -> None:
    """Mark the client's session as single sign-on's, as the SSO callback does (a password
    session of a tenant without passwords ends on its next request)."""
    session = client.session
    session[SIGN_IN_METHOD] = f"sso:{slug}"
    session.save()


def test_the_members_page_turns_passwords_off_and_on(trio):
    acme_provider(trio)
    client = Client()
    client.force_login(trio.alice)
    sso_session(client)
    page = client.get("/t/acme/members/").content.decode()
    assert "Turn password sign-in off" in page and "Single sign-on: Acme Login" in page
    assert SECRET not in page
    assert client.post(URL, {"password_sign_in": "off"}).status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is False
    page = client.get("/t/acme/members/").content.decode()
    assert "Turn password sign-in on" in page and "single sign-on only" in page
    assert client.post(URL, {"password_sign_in": "on"}).status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True


def test_the_members_page_refuses_without_a_provider_or_a_choice(trio):
    client = Client()
    client.force_login(trio.alice)
    response = client.post(URL, {"password_sign_in": "off"})
    assert response.status_code == 400 and "Add an identity provider" in response.content.decode()
    assert client.post(URL, {"password_sign_in": "maybe"}).status_code == 400
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True


def test_a_password_session_cannot_turn_passwords_off(trio):
    """Whoever turns passwords off must have come in through single sign-on (or be an API
    key or the operator): a password session would be refused in the tenant right after.
    The members page, REST with a session and the admin all say so and change nothing."""
    acme_provider(trio)
    alice = Client()
    alice.force_login(trio.alice)  # a password session
    page = alice.post(URL, {"password_sign_in": "off"})
    assert page.status_code == 400 and "Sign in with single sign-on first" in page.content.decode()
    rest = alice.patch(API, {"password_sign_in": False}, "application/json", HTTP_X_TENANT="acme")
    assert rest.status_code == 400 and "Sign in with single sign-on first" in rest.content.decode()
    form = {"name": "Acme", "require_confirmation_for_writes": "", "time_zone": "UTC"}
    admin = alice.post(f"/admin/tenancy/tenant/{trio.acme.pk}/change/", form)
    assert admin.status_code == 200
    assert "Sign in with single sign-on first" in admin.content.decode()
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True
    with pytest.raises(ValidationError, match="Sign in with single sign-on first"):
        services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False, password_session=True)
    # the operator may (never refused afterwards)
    root = make_user("root", is_staff=True, is_superuser=True)
    operator = Client()
    operator.force_login(root)
    done = operator.post(
        f"/admin/tenancy/tenant/{trio.acme.pk}/change/", {**form, "slug": "acme", "active": "on"}
    )
    assert done.status_code == 302, done.content.decode()[:2000]
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is False
    # and turning passwords back on needs no single sign-on
    alice_sso = Client()
    alice_sso.force_login(trio.alice)
    assert alice.post(URL, {"password_sign_in": "on"}).status_code == 403  # refused in acme
    sso_session(alice_sso)
    assert alice_sso.post(URL, {"password_sign_in": "on"}).status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True


def test_the_sign_in_setting_by_role(trio):
    acme_provider(trio)
    member, outsider, anonymous = Client(), Client(), Client()
    member.force_login(trio.bob)
    outsider.force_login(trio.charlie)
    assert member.post(URL, {"password_sign_in": "off"}).status_code == 403
    assert outsider.post(URL, {"password_sign_in": "off"}).status_code == 404
    assert anonymous.post(URL, {"password_sign_in": "off"}).status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True


def test_the_admin_never_shows_the_client_secret(trio):
    row = acme_provider(trio)
    root = make_user("root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(root)
    page = client.get(f"/admin/tenancy/identityprovider/{row.pk}/change/")
    assert page.status_code == 200 and SECRET not in page.content.decode()
    assert SECRET not in client.get("/admin/tenancy/identityprovider/").content.decode()


def test_a_superuser_makes_a_platform_provider_with_rules_for_any_tenant(trio):
    root = make_user("root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(root)
    form = {
        "tenant": "",
        "name": "Corp",
        "slug": "corp",
        "issuer": "https://corp.example",
        "client_id": "c",
        "client_secret": SECRET,
        "scopes": "openid",
        "groups_claim": "groups",
        "default_role": "",
        "enabled": "on",
        "rules-TOTAL_FORMS": "1",
        "rules-INITIAL_FORMS": "0",
        "rules-0-group": "eng",
        "rules-0-tenant": str(trio.globex.pk),
        "rules-0-role": "admin",
    }
    response = client.post("/admin/tenancy/identityprovider/add/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    (corp,) = sso.providers(tenant=trio.globex)
    assert corp.tenant_id is None and corp.client_secret == SECRET
    assert corp.rules == (sso.GroupRule("eng", trio.globex.pk, "admin"),)


def test_tenant_admins_see_their_providers_only_and_make_no_platform_one(trio):
    row = acme_provider(trio)
    theirs = IdentityProvider.objects.create(
        tenant=trio.globex, slug="globex-idp", name="G", issuer="https://g.example", client_id="c"
    )
    client = Client()
    client.force_login(trio.alice)
    listing = client.get("/admin/tenancy/identityprovider/").content.decode()
    assert "Acme Login" in listing and "globex-idp" not in listing
    assert client.get(f"/admin/tenancy/identityprovider/{theirs.pk}/change/").status_code == 404
    assert client.get(f"/admin/tenancy/identityprovider/{row.pk}/change/").status_code == 200
    form = {
        "name": "Mine",
        "slug": "mine",
        "issuer": "https://mine.example",
        "client_id": "c",
        "scopes": "openid",
        "groups_claim": "groups",
        "default_role": "",
        "enabled": "on",
        "rules-TOTAL_FORMS": "0",
        "rules-INITIAL_FORMS": "0",
    }
    client.post("/admin/tenancy/identityprovider/add/", form)
    made = IdentityProvider.objects.get(slug="mine")
    assert made.tenant_id == trio.acme.pk  # never platform-wide


def provider_form(**fields) -> dict:
    return {
        "name": "Mine",
        "slug": "mine",
        "issuer": "https://mine.example",
        "client_id": "c",
        "client_secret": SECRET,
        "scopes": "openid",
        "groups_claim": "groups",
        "default_role": "",
        "enabled": "on",
        "rules-TOTAL_FORMS": "0",
        "rules-INITIAL_FORMS": "0",
        **fields,
    }


def test_the_admin_saves_a_tenants_provider_and_rules_through_the_services(trio):
    client = Client()
    client.force_login(trio.alice)
    form = provider_form(
        **{
            "rules-TOTAL_FORMS": "2",
            "rules-0-group": "eng",
            "rules-0-tenant": str(trio.acme.pk),
            "rules-0-role": "member",
            "rules-1-group": "bosses",
            "rules-1-tenant": str(trio.acme.pk),
            "rules-1-role": "owner",
        }
    )
    response = client.post("/admin/tenancy/identityprovider/add/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    made = IdentityProvider.objects.get(slug="mine")
    assert made.tenant_id == trio.acme.pk and made.client_secret == SECRET
    assert dict(made.rules.values_list("group", "role")) == {"eng": "member", "bosses": "owner"}
    entries = AuditEntry.objects.filter(
        tenant=trio.acme, object_type__startswith="tenancy.identity"
    )
    assert sorted(entry.object_type for entry in entries) == [
        "tenancy.identityprovider",
        "tenancy.identityprovidergroup",
        "tenancy.identityprovidergroup",
    ]
    provider_entry = entries.get(object_type="tenancy.identityprovider")
    assert provider_entry.changes["client_secret"] == [None, "[set]"]
    assert all(entry.user_id == trio.alice.pk for entry in entries)
    assert SECRET not in str(list(entries.values("changes", "details")))
    # a bad issuer is the form's error, as on REST
    bad = client.post(
        "/admin/tenancy/identityprovider/add/", provider_form(slug="x", issuer="ftp://x.example")
    )
    assert bad.status_code == 200 and not IdentityProvider.objects.filter(slug="x").exists()


def test_in_the_admin_a_provider_giving_the_owner_role_is_an_owners_alone(trio):
    dana = make_user("dana")
    services.membership_set(tenant=trio.acme, user=dana, role=Role.ADMIN)
    owners = acme_provider(trio, default_role=Role.OWNER)
    client = Client()
    client.force_login(dana)
    url = f"/admin/tenancy/identityprovider/{owners.pk}/"
    assert client.post(f"{url}change/", provider_form(slug="acme-idp")).status_code == 403
    assert client.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    refused = client.post(
        "/admin/tenancy/identityprovider/add/", provider_form(default_role="owner")
    )
    assert refused.status_code == 200  # not a choice for someone who owns no tenant
    assert not IdentityProvider.objects.filter(slug="mine").exists()
    owners.refresh_from_db()
    assert owners.name == "Acme Login"


def test_the_admin_keeps_the_last_provider_while_passwords_are_off(trio):
    row = acme_provider(trio)
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    client = Client()
    client.force_login(trio.alice)
    sso_session(client)
    response = client.post(
        f"/admin/tenancy/identityprovider/{row.pk}/delete/", {"post": "yes"}, follow=True
    )
    assert "Turn password sign-in on first" in response.content.decode()
    assert IdentityProvider.objects.filter(pk=row.pk).exists()
    assert IdentityProviderGroup.objects.filter(provider=row).exists()


def test_the_tenant_admin_page_refuses_passwords_off_without_a_provider(trio):
    client = Client()
    client.force_login(trio.alice)
    form = {
        "name": "Acme",
        "require_confirmation_for_writes": "",
        "time_zone": "UTC",
    }  # no password
    response = client.post(f"/admin/tenancy/tenant/{trio.acme.pk}/change/", form)
    assert response.status_code == 200 and "Add an identity provider" in response.content.decode()
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True
    acme_provider(trio)
    sso_session(client)  # (a password session may not: test_a_password_session_cannot_...)
    response = client.post(f"/admin/tenancy/tenant/{trio.acme.pk}/change/", form)
    assert response.status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is False


# -- REST ----------------------------------------------------------------------------------
API = "/api/v1/sign-in"


def test_rest_shows_and_switches_password_sign_in(trio):
    acme_provider(trio)
    _, key = services.api_key_create(tenant=trio.acme, name="adm", scopes=["admin"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    shown = Client().get(API, **auth)
    assert shown.status_code == 200, shown.content
    assert shown.json() == {
        "password_sign_in": True,
        "identity_providers": [
            {
                "slug": "acme-idp",
                "name": "Acme Login",
                "issuer": "https://login.acme.example",
                "platform_wide": False,
                "sign_in_url": "http://testserver/sso/acme-idp/",
            }
        ],
    }
    off = Client().patch(API, {"password_sign_in": False}, "application/json", **auth)
    assert off.status_code == 200 and off.json()["password_sign_in"] is False
    assert SECRET not in off.content.decode()
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is False
    assert Client().get("/api/v1/agents", **auth).status_code == 200  # keys still work


def test_rest_refuses_without_a_provider_or_a_boolean_or_a_role(trio):
    _, key = services.api_key_create(tenant=trio.acme, name="adm", scopes=["admin"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    refused = Client().patch(API, {"password_sign_in": False}, "application/json", **auth)
    assert refused.status_code == 400 and "Add an identity provider" in refused.content.decode()
    bad = Client().patch(API, {"password_sign_in": "perhaps"}, "application/json", **auth)
    assert bad.status_code == 400
    _, reader = services.api_key_create(tenant=trio.acme, name="r", scopes=["read"])
    assert Client().get(API, HTTP_AUTHORIZATION=f"Bearer {reader}").status_code == 403
    member = Client()
    member.force_login(trio.bob)
    assert member.get(API, HTTP_X_TENANT="acme").status_code == 403
    outsider = Client()
    outsider.force_login(trio.charlie)
    assert outsider.get(API, HTTP_X_TENANT="acme").status_code == 404
    assert Client().get(API).status_code in (401, 403)
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is True


@pytest.mark.django_db(transaction=True)
def test_first_sign_ins_at_once_make_one_person_and_distinct_usernames(trio):
    """Two sign-ins of one new person at once make one user; two new people whose claims
    ask for the same username get different ones (no unique-constraint error, no 500)."""
    import threading

    from django.contrib.auth import get_user_model
    from django.db import connection

    acme_provider(trio)
    provider = sso.provider_named("acme-idp")
    claims = [
        {"iss": provider.issuer, "sub": "same-person", "preferred_username": "sam"},
        {"iss": provider.issuer, "sub": "same-person", "preferred_username": "sam"},
        {"iss": provider.issuer, "sub": "another", "preferred_username": "sam"},
        {"iss": provider.issuer, "sub": "a-third", "preferred_username": "sam"},
    ]
    start, users, errors = threading.Barrier(len(claims)), [], []

    def sign_in(claim: dict) -> None:
        try:
            start.wait()
            users.append(sso.user_for_identity(provider=provider, claims=claim))
        except Exception as exc:  # (the assertion below names it)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sign_in, args=(c,)) for c in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({u.pk for u in users}) == 3  # the same person twice is one user
    made = get_user_model().objects.filter(username__startswith="sam")
    assert made.count() == 3 and len({u.username for u in made}) == 3


def test_a_membership_the_groups_no_longer_give_goes_with_the_keys_its_member_made(trio):
    acme_provider(trio)
    provider = sso.provider_named("acme-idp")
    dave = make_user("dave")
    services.memberships_sync(user=dave, provider=provider, groups={"staff"})
    services.membership_set(tenant=trio.acme, user=dave, role=Role.ADMIN)
    key, full = services.api_key_create(
        tenant=trio.acme, name="daves", scopes=["admin"], created_by=dave
    )
    made, made_full = services.api_key_create(
        tenant=trio.acme, name="made", scopes=["read"], made_by_key=find_usable_key(full)
    )
    services.memberships_sync(user=dave, provider=provider, groups=set())  # left the group
    assert not Membership.objects.filter(tenant=trio.acme, user=dave).exists()
    assert find_usable_key(full) is None and find_usable_key(made_full) is None
    (entry,) = AuditEntry.objects.filter(tenant=trio.acme, action="member.removed")
    assert {k["id"] for k in entry.details["revoked_api_keys"]} == {key.pk, made.pk}
