"""The Content-Security-Policy: the consent page's form may lead to the client's redirect
URI (a browser checks `form-action` on the redirect after a submission), and to nothing
else; tests/browser/test_mcp_oauth.py sees it work in Chromium."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import urlencode

import pytest
from django.test import Client

from agentplatform.web.csp import POLICY, policy_allowing_forms_to
from tenancy.sign_on import oauth
from tests.factories import login

pytestmark = pytest.mark.django_db


def form_action(policy: str) -> str:
    (directive,) = [d for d in policy.split("; ") if d.startswith("form-action ")]
    return directive


@pytest.mark.parametrize(
    ("url", "directive"),
    [
        ("http://127.0.0.1:8765/callback", "form-action 'self' http://127.0.0.1:8765"),
        ("https://Client.Example/cb?x=1", "form-action 'self' https://client.example"),
        ("http://localhost:33418/", "form-action 'self' http://localhost:33418"),
        ("http://[::1]:8080/cb", "form-action 'self' http://*:8080"),  # CSP names no IPv6
    ],
)
def test_it_lets_a_form_lead_to_the_urls_origin(url, directive):
    assert form_action(policy_allowing_forms_to(url)) == directive
    assert policy_allowing_forms_to(url).replace(directive, "form-action 'self'") == POLICY


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example; script-src 'unsafe-inline'/cb",  # no header injection
        "https://a b/cb",
        "http://127.0.0.1:port/cb",
        "javascript:alert(1)",
        "/relative",
    ],
)
def test_it_adds_nothing_for_what_is_not_an_http_origin(url):
    assert policy_allowing_forms_to(url) == POLICY


def test_the_consent_page_lets_its_form_go_to_the_clients_redirect_uri(trio):
    redirect_uri = "http://127.0.0.1:8765/callback"
    client = oauth.register_client(name="c", redirect_uris=[redirect_uri])
    digest = hashlib.sha256(b"v" * 43).digest()
    params = {
        "response_type": "code", "client_id": client.client_id, "redirect_uri": redirect_uri,
        "code_challenge": base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
        "code_challenge_method": "S256",
    }  # fmt: skip
    browser = login(Client(), trio.alice)
    page = browser.get(f"/oauth/authorize?{urlencode(params)}")
    assert page.status_code == 200
    policy = page["Content-Security-Policy"]
    assert form_action(policy) == "form-action 'self' http://127.0.0.1:8765"
    refused = browser.get(f"/oauth/authorize?{urlencode({**params, 'client_id': 'nobody'})}")
    assert form_action(refused["Content-Security-Policy"]) == "form-action 'self'"
