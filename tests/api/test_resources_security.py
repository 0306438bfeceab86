"""REST resources as a whole: tenant walls, secrets, hostile input, errors and the schema."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from django.core.management import call_command

from agents.models import Agent, Conversation, Fact
from tests.api.test_resources import Api, as_key, assert_error, key_for
from tests.factories import make_agent, make_connection, make_crew, make_tool

ALL_SCOPES = ("read", "write", "run", "admin")


def nested(depth: int) -> dict:
    return {"type": "object", "x": nested(depth - 1)} if depth else {}


def globex_objects(trio) -> dict[str, object]:
    """One of everything in globex, which acme must never reach."""
    agent = make_agent(trio.globex, "g-agent")
    crew = make_crew(trio.globex, "g-crew", [agent], name="G")
    return {
        "agent": agent,
        "crew": crew,
        "connection": make_connection(trio.globex, "G"),
        "conversation": Conversation.objects.create(tenant=trio.globex, agent=agent),
        "fact": Fact.objects.create(tenant=trio.globex, user=trio.charlie, text="g"),
        "tool": make_tool(trio.globex, "g_tool"),
    }


def test_every_endpoint_answers_404_for_another_tenants_ids(client, trio):
    from tenancy.models import ApiKey, Membership

    g = globex_objects(trio)
    member_id = Membership.objects.get(tenant=trio.globex).pk
    key_id = ApiKey.objects.get(prefix=key_for(trio.globex, "read").split("_")[1]).pk
    requests = [
        ("get", "/agents/g-agent"),
        ("patch", "/agents/g-agent"),
        ("put", "/agents/g-agent"),
        ("delete", "/agents/g-agent"),
        ("get", "/crews/g-crew"),
        ("patch", "/crews/g-crew"),
        ("put", "/crews/g-crew"),
        ("delete", "/crews/g-crew"),
        ("get", "/tools/g_tool"),
        ("patch", "/tools/g_tool"),
        ("put", "/tools/g_tool"),
        ("delete", "/tools/g_tool"),
        ("post", "/tools/g_tool/execute"),
        ("get", f"/provider-connections/{g['connection'].pk}"),
        ("patch", f"/provider-connections/{g['connection'].pk}"),
        ("put", f"/provider-connections/{g['connection'].pk}"),
        ("delete", f"/provider-connections/{g['connection'].pk}"),
        ("post", f"/provider-connections/{g['connection'].pk}/test"),
        ("get", f"/conversations/{g['conversation'].pk}"),
        ("get", f"/conversations/{g['conversation'].pk}/messages"),
        ("delete", f"/conversations/{g['conversation'].pk}"),
        ("get", f"/facts/{g['fact'].pk}"),
        ("delete", f"/facts/{g['fact'].pk}"),
        ("get", f"/api-keys/{key_id}"),
        ("post", f"/api-keys/{key_id}/revoke"),
        ("delete", f"/api-keys/{key_id}"),
        ("get", f"/members/{member_id}"),
        ("patch", f"/members/{member_id}"),
        ("put", f"/members/{member_id}"),
        ("delete", f"/members/{member_id}"),
    ]
    api = as_key(client, trio.acme, *ALL_SCOPES)
    for method, path in requests:
        call = getattr(api, method)
        response = call(path) if method in ("get", "delete") else call(path, {"arguments": {}})
        assert response.status_code == 404, (method, path, response.content)
        assert_error(response, 404, "not_found")
    assert Agent.objects.filter(pk=g["agent"].pk).exists()
    assert Fact.objects.filter(pk=g["fact"].pk).exists()
    assert ApiKey.objects.get(pk=key_id).revoked_at is None
    for name in ("agents", "crews", "provider-connections", "conversations", "facts"):
        assert api.get(f"/{name}").json()["results"] == [], name


def test_scopes_are_enforced(client, trio):
    make_agent(trio.acme, "support")
    reader = as_key(client, trio.acme, "read")
    assert reader.get("/agents").status_code == 200
    for response in (
        reader.post("/agents", {"slug": "x", "name": "X"}),
        reader.patch("/agents/support", {"name": "Y"}),
        reader.delete("/agents/support"),
        reader.post("/crews", {"slug": "c", "name": "C"}),
        reader.post("/provider-connections", {"name": "x", "kind": "offline"}),
        reader.post("/conversations", {"agent": "support"}),
        reader.post("/tools/calculator/execute", {"arguments": {"expression": "1"}}),
    ):
        assert_error(response, 403, "permission_denied")
    runner = as_key(client, trio.acme, "run")
    assert_error(runner.get("/agents"), 403)  # run alone does not read
    assert Agent.objects.get(slug="support").name == "Support"


def test_requests_without_a_key_get_401_in_the_error_format(client, trio):
    for path in ("/agents", "/tools", "/api-keys", "/members", "/facts"):
        response = Api(client).get(path)
        assert_error(response, 401)
        assert response["WWW-Authenticate"].startswith("Bearer")
    assert_error(Api(client, "ap_000000000000_nope").get("/agents"), 401)


def test_no_response_ever_carries_a_secret(client, trio, settings):
    settings.EGRESS_ALLOWLIST = []
    secrets = {
        "provider": "sk-ant-SCAN-PROVIDER-1234567890",
        "tool": "tool-SCAN-SECRET-0987654321",
        "remote": "remote-SCAN-TOKEN-1122334455",
    }
    api = as_key(client, trio.acme, *ALL_SCOPES)
    connection = api.post(
        "/provider-connections",
        {"name": "Claude", "kind": "anthropic", "api_key": secrets["provider"], "max_retries": 0},
    ).json()
    api.post(
        "/tools",
        {
            "name": "weather",
            "kind": "http",
            "description": "Weather.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "config": {"url": "http://127.0.0.1:9/weather", "auth": {"type": "bearer"}},
            "secret": secrets["tool"],
        },
    )
    api.post(
        "/agents",
        {
            "slug": "far",
            "name": "Far",
            "kind": "remote",
            "remote_url": "https://agents.example.com",
            "remote_token": secrets["remote"],
            "provider_connection": connection["id"],
        },
    )
    api.post("/crews", {"slug": "crew", "name": "Crew", "members": ["far"]})
    api.post("/conversations", {"agent": "far"})
    paths = [
        "/agents",
        "/agents/far",
        "/crews",
        "/crews/crew",
        "/tools",
        "/tools/weather",
        "/tools?enabled=false",
        "/provider-connections",
        f"/provider-connections/{connection['id']}",
        "/conversations",
        "/facts",
        "/api-keys",
        "/members",
    ]
    for path in paths:
        assert api.get(path).status_code == 200, path
    # Calls that use the secrets, failing where they reach out, must not echo them either.
    api.post(f"/provider-connections/{connection['id']}/test")
    api.post("/tools/weather/execute", {"arguments": {"city": "Paris"}})
    api.patch("/tools/weather", {"secret": None})  # refused: bearer auth needs one
    api.patch(f"/provider-connections/{connection['id']}", {"api_key": ""})  # refused
    assert len(api.bodies) > len(paths)
    for body in api.bodies:
        for secret in secrets.values():
            assert secret not in body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"slug": "a", "name": "A", "surprise": 1}, "surprise"),
        ({"slug": "a", "name": "A", "max_rounds": "many"}, "max_rounds"),
        ({"slug": "a", "name": "A", "max_rounds": 10**30}, "max_rounds"),
        ({"slug": "a", "name": "A", "max_rounds": 0}, "max_rounds"),
        ({"slug": "a", "name": ["A"]}, "name"),
        ({"slug": "a", "name": "A" * 100_000}, "name"),
        ({"slug": "a", "name": "A", "instructions": "x" * 200_000}, "instructions"),
        ({"slug": "a", "name": "A\x00"}, "name"),
        ({"slug": "a", "name": "A", "tool_names": "calculator"}, "tool_names"),
        ({"slug": "a", "name": "A", "tool_names": [{"x": 1}]}, "tool_names"),
        ({"slug": "a", "name": "A", "output_schema": {"type": "object", "x": "\x00"}}, None),
        ({"slug": "a", "name": "A", "output_schema": {"type": "object", "x": "\ud800"}}, None),
        ({"slug": "a", "name": "A", "output_schema": [1]}, "output_schema"),
        ({"slug": "a", "name": "A", "temperature": "hot"}, "temperature"),
        ({"slug": "a", "name": "A", "provider_connection": "x"}, "provider_connection"),
        ({"slug": "a", "name": "A", "provider_connection": 2**70}, "provider_connection"),
        ({"slug": "a", "name": "A", "active": "perhaps"}, "active"),
    ],
)
def test_bad_fields_are_400_naming_the_field(client, trio, body, field):
    response = as_key(client, trio.acme).post("/agents", body)
    details = assert_error(response, 400, "invalid")["details"]
    if field is not None:
        assert field in details, details


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        "[1, 2]",
        '"just a string"',
        "null",
        "[" * 100_000 + "]" * 100_000,
        '{"slug": "a", "name": "A", "temperature": NaN}',
        json.dumps({"slug": "a", "name": "A", "output_schema": nested(100)}),
    ],
)
def test_malformed_bodies_are_400(client, trio, raw):
    assert_error(as_key(client, trio.acme).post("/agents", raw=raw), 400)


def test_hostile_paths_and_query_strings_never_500(client, trio):
    api = as_key(client, trio.acme, *ALL_SCOPES)
    for path in (
        "/agents/%00",
        "/agents/" + "a" * 5000,
        "/crews/%00",
        "/tools/%00",
        "/tools/%00/execute",
        "/conversations/99999999999999999999999",
        "/conversations/-1",
        "/conversations/abc/messages",
        "/facts/1.5",
        "/provider-connections/%00",
        "/api-keys/99999999999999999999999",
        "/members/x",
    ):
        response = api.get(path) if not path.endswith("execute") else api.post(path, {})
        assert response.status_code == 404, (path, response.content)
        assert_error(response, 404)
    for path, params in (
        ("/agents", {"kind": "\x00"}),
        ("/agents", {"active": "\x00"}),
        ("/tools", {"kind": "\x00"}),
        ("/conversations", {"agent": "\x00"}),
        ("/facts", {"user": "99999999999999999999999"}),
        ("/api-keys", {"active": "x"}),
        ("/members", {"role": "x" * 1000}),
    ):
        assert_error(api.get(path, params), 400)
    for path in ("/agents", "/crews", "/conversations", "/api-keys", "/members"):
        assert_error(api.get(path, {"cursor": "abc"}), 404)


def test_unknown_paths_answer_404_in_the_error_format_for_anyone(client, trio):
    from django.test import Client

    api = as_key(client, trio.acme, *ALL_SCOPES)
    for path in ("/nope", "/agents/", "/agents/support/nope", "/" + "x/" * 50):
        assert_error(api.get(path), 404, "not_found")
        assert_error(api.post(path, {"name": "x"}), 404, "not_found")
    assert_error(Api(client).get("/nope"), 404, "not_found")  # no key: nothing to hide
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(trio.bob)
    response = browser.delete("/api/v1/nope")  # a session without a CSRF token
    assert_error(response, 404, "not_found")
    assert Agent.objects.filter(tenant=trio.acme).exists() is False  # nothing was made


def test_write_bodies_of_every_resource_reject_unknown_fields(client, trio):
    make_agent(trio.acme, "support")
    api = as_key(client, trio.acme, *ALL_SCOPES)
    for path in (
        "/agents",
        "/crews",
        "/tools",
        "/provider-connections",
        "/conversations",
        "/api-keys",
        "/members",
    ):
        response = api.post(path, {"nonsense": True})
        assert "nonsense" in assert_error(response, 400)["details"], path
    assert_error(api.post("/tools/calculator/execute", {"arguments": {}, "extra": 1}), 400)


def test_the_openapi_schema_validates_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = yaml.safe_load(target.read_text())
    paths = schema["paths"]
    for path in (
        "/api/v1/agents",
        "/api/v1/agents/{slug}",
        "/api/v1/crews/{slug}",
        "/api/v1/tools/{name}/execute",
        "/api/v1/provider-connections/{id}/test",
        "/api/v1/conversations/{id}/messages",
        "/api/v1/facts",
        "/api/v1/api-keys/{id}/revoke",
        "/api/v1/members/{id}",
    ):
        assert path in paths, path
    resource_paths = {p: ops for p, ops in paths.items() if p != "/api/v1/whoami"}
    resource_paths = {p: ops for p, ops in resource_paths.items() if "/runs" not in p}
    for path, operations in resource_paths.items():
        if not path.startswith("/api/v1/") or path.startswith("/api/v1/chat"):
            continue
        for method, operation in operations.items():
            if method == "parameters":
                continue
            assert operation.get("summary"), (method, path)
            documented = [operation.get("requestBody", {}), *operation["responses"].values()]
            examples = [
                c.get("examples") for d in documented for c in d.get("content", {}).values()
            ]
            assert any(examples), (method, path)
    write_only = schema["components"]["schemas"]["ProviderConnection"]["properties"]
    assert "api_key" not in write_only and "has_api_key" in write_only
    assert "api_key" in schema["components"]["schemas"]["ProviderConnectionRequest"]["properties"]


@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
def test_the_docs_pages_use_only_local_assets(client, path):
    response = client.get(path)
    assert response.status_code == 200
    page = response.content.decode()
    assert "https://cdn" not in page
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any(a.startswith("/static/drf_spectacular_sidecar/") for a in assets), assets
    for asset in assets:
        assert not asset.startswith(("http://", "https://", "//")), asset


def test_the_redoc_page_loads_its_script_locally(client):
    page = client.get("/api/redoc/").content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert scripts and all(s.startswith("/static/drf_spectacular_sidecar/") for s in scripts)
    assert "https://cdn" not in page
