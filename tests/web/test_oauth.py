"""The OAuth endpoints MCP clients use (agentplatform/web/oauth.py), request by request:
what registration refuses and how, the resource a client names (RFC 8707), and CORS for
browser-based clients. tests/mcp/test_oauth.py has whole flows against a live server."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agentplatform import rate_counters
from agentplatform.tenancy.models import OAuthClient

pytestmark = pytest.mark.django_db

ADDRESS = "192.0.2.7"  # the registration counter is per address


@pytest.fixture
def anyone() -> Client:
    rate_counters.reset(f"throttle:oauth-register:{ADDRESS}")
    return Client(REMOTE_ADDR=ADDRESS)


def register(client: Client, body: object, **headers):
    return client.post(
        "/oauth/register", json.dumps(body), content_type="application/json", **headers
    )


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ({"redirect_uris": ["https://evil.com; script-src x/cb"]}, "invalid_redirect_uri",
         "redirect_uris[0]: a redirect URI may hold only URI characters"),
        ({"redirect_uris": ["https://evil.com;script-src/cb"]}, "invalid_redirect_uri",
         "redirect_uris[0]: its host must be a DNS name"),
        ({"redirect_uris": ["https://ok.example/cb", "http://evil.example/cb"]},
         "invalid_redirect_uri", "redirect_uris[1]: plain http is allowed only on a loopback"),
        ({"redirect_uris": [{"uri": "https://ok.example/cb"}]}, "invalid_redirect_uri",
         "must be a string"),
        ({}, "invalid_redirect_uri", "Give 1 to 10"),
        ({"client_name": "\u0007bell", "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "control characters"),
        ({"client_name": "\ud83d", "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "control characters"),  # (the database would refuse it)
        ({"client_name": 7, "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "must be a string"),
        ({"client_name": "x" * 20_000, "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "at most 16384 bytes"),
        (["not", "an", "object"], "invalid_client_metadata", "JSON object"),
    ],
)  # fmt: skip
def test_registration_refuses_hostile_metadata_with_a_400_saying_why(anyone, body, code, words):
    refused = register(anyone, body)
    assert refused.status_code == 400, refused.content
    assert refused.json()["error"] == code
    assert words in refused.json()["error_description"]
    assert refused["Cache-Control"] == "no-store"
    assert not OAuthClient.objects.exists()


def test_registration_takes_a_client_without_a_name(anyone):
    registered = register(anyone, {"redirect_uris": ["http://[::1]:8080/cb"]})
    assert registered.status_code == 201
    assert registered.json()["client_name"] == ""
    assert OAuthClient.objects.get().redirect_uris == ["http://[::1]:8080/cb"]
