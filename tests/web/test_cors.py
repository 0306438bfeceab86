"""CORS (agentplatform/web/cors.py): the OAuth endpoints a browser-based MCP client calls
answer any origin, without credentials, preflights included; the consent page and the
other pages answer none. /mcp's own CORS is tested against a live server
(tests/mcp/test_oauth.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import login

pytestmark = pytest.mark.django_db

ELSEWHERE = "https://app.example"
OPEN = {
    "/.well-known/oauth-authorization-server": "GET, HEAD, OPTIONS",
    "/oauth/register": "POST, OPTIONS",
    "/oauth/token": "POST, OPTIONS",
}


def preflight(client: Client, path: str, method: str, headers: str):
    return client.options(
        path,
        HTTP_ORIGIN=ELSEWHERE,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD=method,
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS=headers,
    )


@pytest.mark.parametrize(("path", "methods"), OPEN.items())
def test_an_oauth_endpoint_answers_a_preflight_from_any_origin(path, methods):
    method = methods.split(", ")[0]
    answer = preflight(Client(), path, method, "content-type,mcp-protocol-version")
    assert answer.status_code == 204
    assert answer["Access-Control-Allow-Origin"] == "*"
    assert answer["Access-Control-Allow-Methods"] == methods
    assert answer["Access-Control-Allow-Headers"] == "Content-Type, MCP-Protocol-Version"
    assert "Access-Control-Allow-Credentials" not in answer


def test_the_oauth_endpoints_answers_are_open_to_any_origin_errors_included():
    client = Client(HTTP_ORIGIN=ELSEWHERE)
    answers = [
        client.get("/.well-known/oauth-authorization-server"),
        client.post("/oauth/register", "[]", content_type="application/json"),  # 400
        client.post("/oauth/token", {"grant_type": "password"}),  # 400
        client.get("/oauth/token"),  # 405
    ]
    assert [a.status_code for a in answers] == [200, 400, 400, 405]
    for answer in answers:
        assert answer["Access-Control-Allow-Origin"] == "*"
        assert answer["Access-Control-Expose-Headers"] == "Retry-After"
        assert "Access-Control-Allow-Credentials" not in answer
    assert answers[0].json()["token_endpoint"].endswith("/oauth/token")


@pytest.mark.parametrize("path", ["/oauth/authorize", "/login/", "/", "/api/v1/whoami"])
def test_the_consent_page_and_the_other_pages_answer_no_origin(path, trio):
    for client in (Client(), login(Client(), trio.alice)):
        answers = [
            preflight(client, path, "POST", "content-type"),
            client.get(path, HTTP_ORIGIN=ELSEWHERE),
        ]
        for answer in answers:
            assert not any(h.lower().startswith("access-control-") for h in answer.headers)
