"""Single sign-on against a real OpenID Connect provider: django-oauth-toolkit with OIDC on,
running as a second process on loopback (tests/fakes/oidc_provider). The platform's side
is the Django test client; every exchange with the provider (discovery, authorize, its
login form, the token endpoint, JWKS, userinfo) is real HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import jwt
import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory

from agentplatform.web.sso import client as sso_client
from agentplatform.web.sso.backend import SSOBackend
from agentplatform.web.sso.client import SSOError
from tenancy import services
from tenancy.models import (
    AuditEntry,
    ExternalIdentity,
    IdentityProvider,
    IdentityProviderGroup,
    Membership,
    Role,
)
from tenancy.sign_in import SIGN_IN_METHOD
from tenancy.sign_on import sso
from tests.factories import PASSWORD, add_member, make_user
from tests.fakes.oidc_provider.process import OIDCProvider, start_oidc_provider
from tests.live_server import reserved_port

pytestmark = pytest.mark.integration

CALLBACK = "http://testserver/sso/callback/"


@pytest.fixture(scope="module")
def idp():
    with reserved_port() as port:  # held until the provider listens on it
        provider = start_oidc_provider(port, CALLBACK)
    yield provider
    provider.stop()


@pytest.fixture(autouse=True)
def _sso_settings(settings):
    settings.SSO_EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    settings.SSO_REQUIRE_HTTPS = False


@pytest.fixture
def acme_idp(trio, idp) -> IdentityProvider:
    """acme's own provider: acme-admins -> admin, acme-staff -> member."""
    row = IdentityProvider.objects.create(
        tenant=trio.acme,
        slug="acme-idp",
        name="Acme Login",
        issuer=idp.issuer,
        client_id="platform",
        client_secret="platform-secret",
        scopes="openid email profile",
        groups_claim="groups",
    )
    IdentityProviderGroup.objects.create(
        provider=row, group="acme-admins", tenant=trio.acme, role=Role.ADMIN
    )
    IdentityProviderGroup.objects.create(
        provider=row, group="acme-staff", tenant=trio.acme, role=Role.MEMBER
    )
    return row


def sign_in(client: Client, idp: OIDCProvider, slug: str, username: str, next_url: str = ""):
    """The whole code flow: our start view, the provider's authorize and login form (real
    HTTP, consent skipped by the application), then our callback with the code."""
    start = client.get(f"/sso/{slug}/" + (f"?next={next_url}" if next_url else ""))
    assert start.status_code == 302, start.content
    url = start["Location"]
    browser = requests.Session()
    for _ in range(10):
        response = browser.get(url, allow_redirects=False, timeout=10)
        if response.status_code == 200:  # the provider's login form
            response = browser.post(
                url,
                data={
                    "username": username,
                    "password": username * 2,
                    "next": parse_qs(urlsplit(url).query)["next"][0],
                },
                allow_redirects=False,
                timeout=10,
            )
        assert response.status_code == 302, response.text
        url = urljoin(url, response.headers["Location"])
        if url.startswith(CALLBACK):
            parts = urlsplit(url)
            return client.get(f"{parts.path}?{parts.query}")
    raise AssertionError("the provider never sent the browser back")


# -- discovery -------------------------------------------------------------------------------
def test_discovery_reads_the_providers_endpoints(idp, db):
    found = sso_client.discover(idp.issuer)
    assert found.issuer == idp.issuer
    assert found.authorization_endpoint == f"{idp.issuer}/authorize/"
    assert found.token_endpoint == f"{idp.issuer}/token/"
    assert found.jwks_uri.startswith(idp.issuer) and found.userinfo_endpoint


@pytest.mark.parametrize(
    "issuer",
    ["file:///etc/passwd", "ftp://127.0.0.1/o", "gopher://x", "not a url", "http:///nohost"],
)
def test_discovery_refuses_what_is_not_http(issuer, db):
    with pytest.raises(SSOError, match="is not an http"):
        sso_client.discover(issuer)


def test_discovery_refuses_a_local_address_unless_allowed(idp, db, settings):
    settings.SSO_EGRESS_ALLOWLIST = []
    with pytest.raises(SSOError) as refused:
        sso_client.discover(idp.issuer + "/x")
    assert "may not reach" in str(refused.value) and "SSO_EGRESS_ALLOWLIST" in str(refused.value)


def test_discovery_errors_are_our_words(db):
    with reserved_port() as port, pytest.raises(SSOError) as error:  # (nothing listens there)
        sso_client.discover(f"http://127.0.0.1:{port}/nobody")
    assert str(error.value) == "The identity provider cannot be reached (discovery document)."


def test_an_unreachable_provider_is_a_clear_page_not_a_500(trio, acme_idp, db):
    with reserved_port() as port:  # (nothing listens there)
        acme_idp.issuer = f"http://127.0.0.1:{port}/gone"
        acme_idp.save()
        response = Client().get("/sso/acme-idp/")
    assert response.status_code == 502
    assert b"The identity provider cannot be reached" in response.content
    assert b"platform-secret" not in response.content


# -- the code flow ---------------------------------------------------------------------------
def test_the_start_sends_state_nonce_and_a_pkce_challenge(trio, acme_idp):
    response = Client().get("/sso/acme-idp/")
    query = parse_qs(urlsplit(response["Location"]).query)
    assert response["Location"].startswith(f"{acme_idp.issuer}/authorize/")
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["state"][0] and query["nonce"][0] and query["client_id"] == ["platform"]
    assert query["redirect_uri"] == [CALLBACK] and query["scope"] == ["openid email profile"]


def test_an_unknown_provider_is_404(db):
    assert Client().get("/sso/nobody/").status_code == 404


def test_a_first_sign_in_creates_the_user_and_their_membership(trio, idp, acme_idp):
    idp.user("dora", groups=["acme-admins"], email="dora@acme.example")
    client = Client()
    response = sign_in(client, idp, "acme-idp", "dora", next_url="/t/acme/")
    assert response.status_code == 302 and response["Location"] == "/t/acme/"
    user = get_user_model().objects.get(username="dora")
    assert user.email == "dora@acme.example" and not user.has_usable_password()
    assert ExternalIdentity.objects.get(user=user).issuer == idp.issuer
    membership = Membership.objects.get(user=user, tenant=trio.acme)
    assert membership.role == Role.ADMIN and membership.sso_provider == "acme-idp"
    assert client.get("/t/acme/").status_code == 200  # signed in, a member
    actions = set(AuditEntry.objects.filter(tenant=trio.acme).values_list("action", flat=True))
    assert {"signin.succeeded", "member.added"} <= actions
    signed_in = AuditEntry.objects.get(tenant=trio.acme, action="signin.succeeded", user=user)
    assert signed_in.details == {"provider": "acme-idp"}


def test_the_next_sign_in_finds_the_same_user(trio, idp, acme_idp):
    idp.user("erin", groups=["acme-staff"])
    sign_in(Client(), idp, "acme-idp", "erin")
    sign_in(Client(), idp, "acme-idp", "erin")
    assert get_user_model().objects.filter(username__startswith="erin").count() == 1


def test_a_taken_username_is_not_taken_over(trio, idp, acme_idp):
    """The provider says "bob": acme's bob (a password account) is not signed in; the
    person gets an account of their own."""
    idp.user("bob", groups=["acme-staff"])
    client = Client()
    assert sign_in(client, idp, "acme-idp", "bob").status_code == 302
    signed_in = client.get("/").wsgi_request.user
    assert signed_in.username == "bob-acme-idp" and signed_in != trio.bob


def test_groups_set_roles_again_on_every_sign_in(trio, idp, acme_idp):
    idp.user("fay", groups=["acme-staff"])
    sign_in(Client(), idp, "acme-idp", "fay")
    user = get_user_model().objects.get(username="fay")
    assert Membership.objects.get(user=user, tenant=trio.acme).role == Role.MEMBER

    idp.user("fay", groups=["acme-staff", "acme-admins"])  # promoted at the provider
    sign_in(Client(), idp, "acme-idp", "fay")
    assert Membership.objects.get(user=user, tenant=trio.acme).role == Role.ADMIN

    idp.user("fay", groups=[])  # left every group
    sign_in(Client(), idp, "acme-idp", "fay")
    assert not Membership.objects.filter(user=user, tenant=trio.acme).exists()
    assert AuditEntry.objects.filter(tenant=trio.acme, action="member.removed").exists()


def test_a_platform_provider_maps_groups_to_several_tenants(trio, idp, settings):
    settings.SSO_PROVIDERS = [
        {
            "slug": "corp",
            "name": "Corp",
            "issuer": idp.issuer,
            "client_id": "platform",
            "client_secret": "platform-secret",
            "groups": [
                {"group": "eng", "tenant": "acme", "role": "member"},
                {"group": "eng-leads", "tenant": "acme", "role": "owner"},
                {"group": "ops", "tenant": "globex", "role": "viewer"},
            ],
        }
    ]
    idp.user("gil", groups=["eng", "eng-leads", "ops"])
    assert sign_in(Client(), idp, "corp", "gil").status_code == 302
    user = get_user_model().objects.get(username="gil")
    roles = dict(Membership.objects.filter(user=user).values_list("tenant__slug", "role"))
    assert roles == {"acme": Role.OWNER, "globex": Role.VIEWER}

    # a membership made otherwise (an invitation, the admin) stays when groups go
    membership = Membership.objects.get(user=user, tenant=trio.globex)
    Membership.objects.filter(pk=membership.pk).update(sso_provider="")
    idp.user("gil", groups=["eng"])
    sign_in(Client(), idp, "corp", "gil")
    roles = dict(Membership.objects.filter(user=user).values_list("tenant__slug", "role"))
    assert roles == {"acme": Role.MEMBER, "globex": Role.VIEWER}


def test_a_tenants_provider_never_grants_roles_elsewhere(trio, idp, acme_idp):
    IdentityProviderGroup.objects.create(
        provider=acme_idp, group="acme-staff", tenant=trio.globex, role=Role.OWNER
    )
    idp.user("hal", groups=["acme-staff"])
    sign_in(Client(), idp, "acme-idp", "hal")
    user = get_user_model().objects.get(username="hal")
    assert list(Membership.objects.filter(user=user).values_list("tenant__slug", flat=True)) == [
        "acme"
    ]


# -- ID token checks -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("wrong-aud", "The ID token was issued for another application."),
        ("wrong-iss", "The ID token was issued by another identity provider."),
        ("expired", "The ID token has expired; sign in again."),
        ("bad-nonce", "The ID token does not belong to this sign-in (its nonce differs)."),
    ],
)
def test_a_spoiled_id_token_is_refused(trio, idp, acme_idp, knob, message):
    idp.user(f"spoil-{knob}", groups=["acme-admins"], knob=knob)
    client = Client()
    response = sign_in(client, idp, "acme-idp", f"spoil-{knob}")
    assert response.status_code == 403
    assert message in response.content.decode()
    assert not client.get("/").wsgi_request.user.is_authenticated
    assert not get_user_model().objects.filter(username=f"spoil-{knob}").exists()
    failed = AuditEntry.objects.get(tenant=trio.acme, action="signin.failed")
    assert failed.details == {"provider": "acme-idp", "reason": message}


def test_a_replayed_callback_is_refused(trio, idp, acme_idp):
    idp.user("ivy", groups=["acme-staff"])
    client = Client()
    start = client.get("/sso/acme-idp/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    response = client.get(f"/sso/callback/?{urlencode({'state': state, 'code': 'made-up'})}")
    assert response.status_code == 403
    assert b"answered HTTP 400 (token endpoint)" in response.content
    again = client.get(f"/sso/callback/?{urlencode({'state': state, 'code': 'made-up'})}")
    assert again.status_code == 400 and b"expired or was already used" in again.content


def test_a_callback_without_a_started_sign_in_is_refused(db):
    response = Client().get("/sso/callback/?state=nope&code=x")
    assert response.status_code == 400 and b"expired or was already used" in response.content


def test_an_error_from_the_provider_is_our_sentence(trio, acme_idp):
    client = Client()
    start = client.get("/sso/acme-idp/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    query = {"state": state, "error": "access_denied", "error_description": "<b>evil</b>"}
    response = client.get(f"/sso/callback/?{urlencode(query)}")
    assert response.status_code == 403
    assert b"The identity provider did not sign you in." in response.content
    assert b"evil" not in response.content


def id_token_from(idp: OIDCProvider, username: str, nonce: str) -> str:
    """A real ID token of `idp`, got by a client of its own (authorize, login, token)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": "platform",
        "redirect_uri": CALLBACK,
        "scope": "openid email",
        "state": "s",
        "nonce": nonce,
        "code_challenge": challenge.decode().rstrip("="),
        "code_challenge_method": "S256",
    }
    browser = requests.Session()
    url = f"{idp.issuer}/authorize/?{urlencode(query)}"
    for _ in range(10):
        response = browser.get(url, allow_redirects=False, timeout=10)
        if response.status_code == 200:
            next_url = parse_qs(urlsplit(url).query)["next"][0]
            response = browser.post(
                url,
                data={"username": username, "password": username * 2, "next": next_url},
                allow_redirects=False,
                timeout=10,
            )
        url = urljoin(url, response.headers["Location"])
        if url.startswith(CALLBACK):
            break
    code = parse_qs(urlsplit(url).query)["code"][0]
    token = requests.post(
        f"{idp.issuer}/token/",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": CALLBACK,
            "code_verifier": verifier,
        },
        auth=("platform", "platform-secret"),
        timeout=10,
    )
    token.raise_for_status()
    return token.json()["id_token"]


def backend_for(provider: sso.SSOProvider) -> SSOBackend:
    backend = SSOBackend()
    backend.provider = provider
    backend.discovery = sso_client.discover(provider.issuer)
    backend.OIDC_OP_JWKS_ENDPOINT = backend.discovery.jwks_uri
    return backend


def test_a_token_from_another_issuer_is_refused(trio, idp, acme_idp):
    """Another provider (its own process, key and issuer) signs a token for the same
    client id: acme's provider refuses it; checked against its own issuer it passes."""
    with reserved_port() as port:  # held until the provider listens on it
        other = start_oidc_provider(port, CALLBACK)
    try:
        other.user("mallory", groups=["acme-admins"])
        token = id_token_from(other, "mallory", nonce="n-1")
        acme = sso.provider_named("acme-idp")
        with pytest.raises(SSOError, match="not signed by a key of this identity provider"):
            backend_for(acme).verify_token(token, nonce="n-1")
        # the other's key, but acme's issuer expected: refused too
        as_other_key = backend_for(acme)
        as_other_key.OIDC_OP_JWKS_ENDPOINT = sso_client.discover(other.issuer).jwks_uri
        with pytest.raises(SSOError, match="issued by another identity provider"):
            as_other_key.verify_token(token, nonce="n-1")
        trusted = sso.SSOProvider(**{**acme.__dict__, "issuer": other.issuer})
        claims = backend_for(trusted).verify_token(token, nonce="n-1")
        assert claims["iss"] == other.issuer and claims["groups"] == ["acme-admins"]
    finally:
        other.stop()


def test_an_unsigned_or_shared_secret_token_is_refused(trio, idp, acme_idp):
    backend = backend_for(sso.provider_named("acme-idp"))
    claims = {"iss": idp.issuer, "aud": "platform", "sub": "1", "exp": 2**40, "iat": 1}
    for token in (
        jwt.encode(claims, key=None, algorithm="none"),
        jwt.encode(claims, key="platform-secret" * 3, algorithm="HS256"),
    ):
        with pytest.raises(SSOError, match="algorithm this platform accepts"):
            backend.verify_token(token, nonce="x")


def test_a_password_sign_in_passes_the_sso_backend_by(trio):
    request = RequestFactory().get("/")
    assert SSOBackend().authenticate(request, username="alice", password="x") is None


def test_password_off_leaves_single_sign_on_working(trio, idp, acme_idp):
    services.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)
    idp.user("jan", groups=["acme-staff"])
    client = Client()
    assert sign_in(client, idp, "acme-idp", "jan").status_code == 302
    assert client.get("/t/acme/").status_code == 200


# -- passwords off: refused per tenant ---------------------------------------------------------
def test_turning_passwords_off_refuses_password_sessions_in_that_tenant_only(trio, idp, acme_idp):
    """olga (an admin through acme's provider) turns passwords off. bob, a member of acme
    and globex with no identity at acme's provider, signed in with his password: acme
    refuses his session with a page offering its provider, globex and his account carry
    on. jan (through the provider) and the operator carry on in acme; so does charlie."""
    add_member(trio.globex, trio.bob, Role.MEMBER)
    bob = Client()
    assert bob.login(username="bob", password=PASSWORD)  # authenticate(), then login()
    idp.user("jan", groups=["acme-staff"])
    jan = Client()
    assert sign_in(jan, idp, "acme-idp", "jan").status_code == 302
    assert jan.session[SIGN_IN_METHOD] == "sso:acme-idp"
    root = Client()
    add_member(trio.acme, make_user("root", is_staff=True, is_superuser=True), Role.MEMBER)
    assert root.login(username="root", password=PASSWORD)
    charlie = Client()  # globex's owner: globex keeps its passwords
    assert charlie.login(username="charlie", password=PASSWORD)
    alice = Client()  # acme's owner, with her password
    assert alice.login(username="alice", password=PASSWORD)
    for client in (bob, jan, root, alice):
        assert client.get("/t/acme/").status_code == 200

    idp.user("olga", groups=["acme-admins"])
    olga = Client()
    assert sign_in(olga, idp, "acme-idp", "olga").status_code == 302
    off = olga.post("/t/acme/members/sign-in/", {"password_sign_in": "off"})
    assert off.status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.password_sign_in is False

    refused = bob.get("/t/acme/")
    assert refused.status_code == 403
    page = refused.content.decode()
    assert "Password sign-in is turned off for Acme. Sign in with your organisation" in page
    assert 'href="/sso/acme-idp/?next=/t/acme/"' in page
    assert "platform-secret" not in page
    assert bob.get("/t/globex/").status_code == 200  # still signed in, elsewhere
    assert bob.get("/api/v1/agents", HTTP_X_TENANT="acme").status_code == 403
    assert bob.get("/api/v1/agents", HTTP_X_TENANT="globex").status_code == 200
    assert bob.get("/account/").status_code == 200
    assert alice.get("/t/acme/").status_code == 403  # the owner's password session too
    assert jan.get("/t/acme/").status_code == 200
    assert root.get("/t/acme/").status_code == 200
    assert charlie.get("/t/globex/").status_code == 200
    # a password still signs bob in (his account, and globex)
    fresh = Client()
    assert fresh.post("/login/", {"username": "bob", "password": PASSWORD}).status_code == 302
    assert fresh.get("/t/globex/").status_code == 200
    # and he leaves acme without signing in to it
    assert fresh.post("/account/leave/acme/").status_code == 302
    assert not Membership.objects.filter(tenant=trio.acme, user=trio.bob).exists()


# -- e-mail from a tenant's own provider ------------------------------------------------------
@pytest.mark.parametrize("knob", ["email-unverified", "email-not-verified"])
def test_a_tenants_provider_email_is_not_trusted_unless_verified(trio, idp, acme_idp, knob):
    """acme's provider says eve's address is victim@corp.example without saying it verified
    it: the address is not stored, and an invitation to it elsewhere (globex) is not eve's
    to accept."""
    _, token = services.invitation_create(
        tenant=trio.globex, invitee="victim@corp.example", role=Role.ADMIN, invited_by=trio.charlie
    )
    idp.user("eve", groups=["acme-staff"], email="victim@corp.example", knob=knob)
    eve = Client()
    assert sign_in(eve, idp, "acme-idp", "eve").status_code == 302
    user = get_user_model().objects.get(username="eve")
    assert user.email == ""
    assert eve.get(f"/invitations/{token}/").status_code == 403
    refused = eve.post(f"/invitations/{token}/", {"action": "accept"})
    assert refused.status_code == 403
    assert not Membership.objects.filter(tenant=trio.globex, user=user).exists()


def test_a_verified_email_from_a_tenants_provider_is_stored(trio, idp, acme_idp):
    idp.user("vera", groups=["acme-staff"], email="vera@acme.example")  # email_verified: true
    assert sign_in(Client(), idp, "acme-idp", "vera").status_code == 302
    assert get_user_model().objects.get(username="vera").email == "vera@acme.example"


@pytest.mark.parametrize(
    ("knob", "stored"), [("email-unverified", True), ("email-not-verified", False)]
)
def test_a_platform_providers_email_is_trusted_unless_it_says_unverified(
    trio, idp, settings, knob, stored
):
    settings.SSO_PROVIDERS = [
        {
            "slug": "corp",
            "name": "Corp",
            "issuer": idp.issuer,
            "client_id": "platform",
            "client_secret": "platform-secret",
            "groups": [{"group": "eng", "tenant": "acme", "role": "member"}],
        }
    ]
    idp.user("paul", groups=["eng"], email="paul@corp.example", knob=knob)
    assert sign_in(Client(), idp, "corp", "paul").status_code == 302
    user = get_user_model().objects.get(username="paul")
    assert user.email == ("paul@corp.example" if stored else "")
