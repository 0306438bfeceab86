"""The rules for what an MCP client may register (tenancy/sign_on/oauth.py): every
value comes from anyone on the network and later reaches a consent page, a Location header
and a CSP header, so anything but a plain absolute http(s) URI with a valid host is refused
before it is stored."""

from __future__ import annotations

import pytest

from tenancy.models import OAuthClient
from tenancy.sign_on import oauth

GOOD = [
    "http://127.0.0.1:8765/callback",
    "http://127.0.0.2/cb",  # all of 127/8 is loopback
    "http://localhost:33418/",
    "http://[::1]:8080/cb",
    "https://client.example",
    "https://Client.Example:8443/cb?x=1&y=%20z",
    "https://192.0.2.1/cb",
    "https://[2001:db8::1]/cb",
    "https://xn--bcher-kva.example/cb",  # an IDN, as its ASCII form
]

BAD = [
    ("https://evil.com; script-src x/cb", "only URI characters"),  # the reported one
    ("https://evil.com;script-src/cb", "DNS name, an IPv4 address or a bracketed IPv6"),
    ("https://a b/cb", "only URI characters"),
    ('https://a.example/"onload', "only URI characters"),
    ("https://a.example/cb\r\nSet-Cookie: x=1", "only URI characters"),
    ("https://bücher.example/cb", "only URI characters"),
    ("https://a.example/%zz", "only URI characters"),
    ("https://a_b.example/cb", "DNS name"),
    ("https://-a.example/cb", "DNS name"),
    ("https://a..example/cb", "DNS name"),
    ("https://1.2.3/cb", "DNS name"),  # browsers read it as an IPv4 address
    ("https://256.1.1.1/cb", "DNS name"),
    ("https://[::1%25eth0]/cb", "DNS name"),  # a zone id
    ("https://[not-ipv6]/cb", "DNS name"),
    ("https://::1/cb", "DNS name"),  # an unbracketed IPv6 address
    ("https://a.example:0/cb", "port must be a number"),
    ("https://a.example:65536/cb", "port must be a number"),
    ("https://a.example:/cb", "port must be a number"),
    ("https://a.example:8080:1/cb", "port must be a number"),
    ("https://[::1]x/cb", "port must be a number"),
    ("https://user:pass@a.example/cb", "userinfo"),
    ("https://a.example/cb#frag", "fragment"),
    ("https://a.example/cb#", "fragment"),
    ("http://evil.example/cb", "only on a loopback host"),
    ("http://127.0.0.1.evil.example/cb", "only on a loopback host"),
    ("HTTPS://a.example/cb", "absolute https URI"),
    ("javascript:alert(1)", "absolute https URI"),
    ("com.example.app:/cb", "absolute https URI"),
    ("/relative", "absolute https URI"),
    ("https://", "absolute https URI"),
    ("https:///cb", "DNS name"),
    ("https://a.example/" + "x" * 2000, "at most 2000 characters"),
    (42, "must be a string"),
    (None, "must be a string"),
]


@pytest.mark.parametrize("uri", GOOD)
def test_it_accepts_https_and_loopback_http_redirect_uris(uri):
    assert oauth.redirect_problem(uri) is None


@pytest.mark.parametrize(("uri", "words"), BAD)
def test_it_says_why_a_redirect_uri_is_refused(uri, words):
    problem = oauth.redirect_problem(uri)
    assert problem is not None and words in problem


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "uris", "code", "words"),
    [
        ("c", ["https://ok.example/cb", "https://evil.com; x/cb"], "invalid_redirect_uri",
         "redirect_uris[1]: "),
        ("c", [], "invalid_redirect_uri", "Give 1 to 10"),
        ("c", ["https://ok.example/cb"] * 11, "invalid_redirect_uri", "Give 1 to 10"),
        ("c", "https://ok.example/cb", "invalid_redirect_uri", "(a list)"),
        ("x" * 201, ["https://ok.example/cb"], "invalid_client_metadata", "at most 200"),
        (["c"], ["https://ok.example/cb"], "invalid_client_metadata", "must be a string"),
        ("a\x00b", ["https://ok.example/cb"], "invalid_client_metadata", "control"),
        ("a\nb", ["https://ok.example/cb"], "invalid_client_metadata", "control"),
        ("\ud800", ["https://ok.example/cb"], "invalid_client_metadata", "control"),
        ("Good\u202eevil", ["https://ok.example/cb"], "invalid_client_metadata", "control"),
    ],
)  # fmt: skip
def test_a_refused_registration_stores_nothing(name, uris, code, words):
    with pytest.raises(oauth.OAuthError) as refused:
        oauth.register_client(name=name, redirect_uris=uris)
    assert refused.value.code == code and words in refused.value.description
    assert not OAuthClient.objects.exists()


@pytest.mark.django_db
def test_a_name_may_be_any_printable_text():
    name = "Éditeur 👩‍💻 (日本語)"  # (the emoji joins with U+200D, a format character)
    client = oauth.register_client(name=name, redirect_uris=["https://ok.example/cb"])
    assert OAuthClient.objects.get().name == name == client.name


@pytest.mark.django_db
def test_a_uri_stored_before_the_checks_is_refused_at_authorization():
    bad = "https://evil.com; script-src x/cb"
    client = OAuthClient.objects.create(client_id="old", name="old", redirect_uris=[bad])
    with pytest.raises(oauth.OAuthError) as refused:
        oauth.client_for(client.client_id, bad)
    assert "register again" in refused.value.description


@pytest.mark.django_db(transaction=True)
def test_two_exchanges_of_one_code_at_once_issue_one_token(trio):
    """The code is spent by one conditional UPDATE: of two exchanges at once, one wins."""
    import base64
    import hashlib
    import threading

    from django.db import connection

    from tenancy.models import OAuthToken

    verifier = "v" * 43
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    client = oauth.register_client(name="c", redirect_uris=["https://ok.example/cb"])
    code = oauth.grant(client=client, user=trio.alice, tenant=trio.acme,
                       redirect_uri="https://ok.example/cb",
                       code_challenge=challenge.rstrip(b"=").decode(),
                       sign_in_method="sso:acme-idp")  # fmt: skip
    start, outcomes = threading.Barrier(2), []

    def exchange() -> None:
        try:
            start.wait()
            outcomes.append(oauth.exchange_code(
                code=code, client_id=client.client_id, redirect_uri="https://ok.example/cb",
                code_verifier=verifier, resource=[], served="https://agents.example/mcp",
            ))  # fmt: skip
        except oauth.OAuthError as refused:
            outcomes.append(refused.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=exchange) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    issued = ["issued" if isinstance(outcome, oauth.Issued) else outcome for outcome in outcomes]
    assert sorted(issued) == ["invalid_grant", "issued"]
    assert OAuthToken.objects.get().sign_in_method == "sso:acme-idp"
