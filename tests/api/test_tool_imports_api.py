"""REST: /api/v1/tools/import/preview and /api/v1/tools/import (an OpenAPI document's
operations as the tenant's tools), end to end to a local server playing the API."""

from __future__ import annotations

import json
from pathlib import Path

from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import add_member, login, make_user
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

DATA = Path(__file__).parent.parent / "data" / "openapi"
PETSTORE_3 = (DATA / "swagger-petstore-3.0.yaml").read_text()
SECRET = "petstore-key-SECRET-42"


def test_preview_then_import_then_call_the_tool_through_a_local_api(client, trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    api = as_key(client, trio.acme, "read", "config", "run")
    with LocalServer() as server:
        base = f"{server.url}/api/v3"
        server.route(
            "GET",
            "/api/v3/pet/7",
            Reply(json={"id": 7, "name": "Rex", "photoUrls": [], "status": "available"}),
        )
        preview = api.post("/tools/import/preview", {"document": PETSTORE_3, "base_url": base})
        assert preview.status_code == 200, preview.content
        body = preview.json()
        assert body["format"] == "OpenAPI 3.0.4" and body["base_url"] == base
        tools = {tool["name"]: tool for tool in body["tools"]}
        assert tools["getPetById"]["status"] == "new"
        assert tools["getPetById"]["config"]["url"] == f"{base}/pet/{{petId}}"
        assert not ToolDefinition.objects.exists()

        chosen = {"operations": ["getPetById", "POST /pet"], "secret": SECRET}
        imported = api.post("/tools/import", {"document": PETSTORE_3, "base_url": base, **chosen})
        assert imported.status_code == 201, imported.content
        assert imported.json() == {
            "tools": [
                {"name": "getPetById", "status": "created", "version": 1},
                {"name": "addPet", "status": "created", "version": 1},
            ]
        }
        called = api.post("/tools/getPetById/execute", {"arguments": {"petId": 7}})
        assert called.status_code == 200, called.content
        assert called.json()["result"]["name"] == "Rex"
        [request] = server.requests
        assert request.path == "/api/v3/pet/7" and request.headers["api_key"] == SECRET
        # A write keeps its method's effect: the tenant's rule asks before it runs.
        assert api.get("/tools/addPet").json()["capability"]["effect"] == "write"

        again = api.post("/tools/import", {"document": PETSTORE_3, "base_url": base, **chosen})
        assert [t["status"] for t in again.json()["tools"]] == ["updated", "updated"]
    assert not any(SECRET in text for text in api.bodies)


def test_bad_documents_and_choices_are_400_naming_where_and_save_nothing(client, trio):
    api = as_key(client, trio.acme, "read", "config")
    external = PETSTORE_3.replace(
        "$ref: '#/components/schemas/Pet'", "$ref: 'https://x.example.com/p.json'", 1
    )
    cases = [
        ({"document": external}, "document", "outside the document"),
        ({"document": "a: [unclosed"}, "document", "neither JSON nor YAML"),
        ({"document": "x" * 2_000_001}, "document", None),
        ({}, "document", "Give `document` or `url`."),
        ({"document": PETSTORE_3, "url": "https://x.example.com"}, "document", None),
        ({"document": PETSTORE_3, "unknown": 1}, "unknown", None),
        ({"url": "http://10.0.0.1/openapi.json"}, "url", "points to a private or local"),
    ]
    for body, field, message in cases:
        for path in ("/tools/import/preview", "/tools/import"):
            sent = {**body, "operations": ["getPetById"]} if path == "/tools/import" else body
            details = assert_error(api.post(path, sent), 400, "invalid")["details"]
            assert field in details, (body, details)
            if message is not None:
                assert message in details[field][0], details
            assert "10.0.0.1" not in json.dumps(details)  # our words, not the guard's
    refused = api.post("/tools/import", {"document": PETSTORE_3, "operations": ["uploadFile2"]})
    details = assert_error(refused, 400)["details"]
    assert details["path"] == "operations[0]" and "no operation" in details["operations"][0]
    refused = api.post("/tools/import", {"document": PETSTORE_3, "operations": ["getPetById"]})
    assert assert_error(refused, 400)["details"]["secret"] == [
        "getPetById sends a credential: give the secret."
    ]
    assert_error(api.post("/tools/import", {"document": PETSTORE_3}), 400)  # no operations
    assert not ToolDefinition.objects.exists()


def test_only_who_may_change_tools_may_import_and_only_in_their_tenant(client, trio):
    body = {"document": PETSTORE_3, "operations": ["logoutUser"]}
    reader = as_key(client, trio.acme, "read")
    assert_error(reader.post("/tools/import/preview", {"document": PETSTORE_3}), 403)
    assert_error(reader.post("/tools/import", body), 403)
    viewer = make_user("vera")
    add_member(trio.acme, viewer, "viewer")
    login(client, viewer)
    assert_error(Api(client, tenant_header="acme").post("/tools/import", body), 403)
    assert_error(Api(client, tenant_header="globex").post("/tools/import", body), 404)
    client.logout()
    assert_error(Api(client).post("/tools/import", body), 401)
    assert not ToolDefinition.objects.exists()
    login(client, trio.alice)  # acme's owner
    assert Api(client, tenant_header="acme").post("/tools/import", body).status_code == 201
    assert list(ToolDefinition.objects.values_list("tenant__slug", "name")) == [
        ("acme", "logoutUser")
    ]
