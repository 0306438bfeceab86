"""Importing an OpenAPI document's operations as a tenant's tools (tools.imports): the
preview's diff, the atomic save with one secret, re-imports, fetching by URL through the
egress guard, and hostile documents refused with nothing saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenancy.models import AuditEntry
from tests.tools.local_server import LocalServer, Reply
from tools.imports import ImportRefused, openapi_import, openapi_preview
from tools.models import ToolDefinition
from tools.services import tool_definition_save

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "openapi"
PETSTORE_2 = (DATA / "petstore-2.0.yaml").read_text()


def statuses(preview) -> dict[str, str]:
    return {tool.draft.name: tool.status for tool in preview.tools}


def test_the_preview_shows_what_the_model_sees_and_a_diff_per_tool(trio):
    first = openapi_preview(tenant=trio.acme, text=PETSTORE_2)
    assert set(statuses(first).values()) == {"new"}
    shown = {tool.draft.name: tool.as_dict() for tool in first.tools}["getPetById"]
    assert shown["description"] == "Find pet by ID\n\nReturns a single pet"
    assert shown["input_schema"]["required"] == ["petId"] and shown["sends_credential"]
    assert {s["operation_id"] for s in first.as_dict()["skipped"]} >= {"uploadFile"}
    openapi_import(
        tenant=trio.acme, text=PETSTORE_2, operations=["getPetById", "getInventory"], secret="k"
    )
    changed = PETSTORE_2.replace("summary: Find pet by ID", "summary: Find one pet")
    again = openapi_preview(tenant=trio.acme, text=changed)
    by_name = {tool.draft.name: tool for tool in again.tools}
    assert by_name["getPetById"].status == "changed"
    assert by_name["getPetById"].changes == ("description",)
    assert by_name["getInventory"].status == "unchanged"
    assert by_name["addPet"].status == "new"
    assert ToolDefinition.objects.count() == 2  # a preview saves nothing


def test_chosen_operations_are_saved_with_the_secret_audited_and_other_tenants_untouched(trio):
    theirs = tool_definition_save(
        tenant=trio.globex,
        changes={"name": "getPetById", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    saved = openapi_import(
        tenant=trio.acme,
        text=PETSTORE_2,
        operations=["getPetById", "GET /store/inventory", "deleteOrder"],
        secret="petstore-SECRET-1",
    )
    assert [d.name for d in saved] == ["getPetById", "getInventory", "deleteOrder"]
    get_pet = ToolDefinition.objects.get(tenant=trio.acme, name="getPetById")
    assert get_pet.secret == "petstore-SECRET-1"
    assert get_pet.config["auth"] == {"type": "header", "header": "api_key"}
    assert get_pet.effect == ""  # the method's: a GET reads, DELETE writes (confirmation)
    delete_order = ToolDefinition.objects.get(tenant=trio.acme, name="deleteOrder")
    assert delete_order.secret is None  # it sends no credential: the secret is not stored
    created = AuditEntry.objects.filter(tenant=trio.acme, action="config.created")
    assert {e.object_repr for e in created} >= {"getPetById", "getInventory", "deleteOrder"}
    assert not any("petstore-SECRET-1" in json.dumps(e.changes) for e in created)
    theirs.refresh_from_db()
    assert theirs.kind == "builtin" and theirs.version == 1


def test_an_import_is_all_or_nothing(trio):
    with pytest.raises(ImportRefused, match="getInventory sends a credential") as caught:
        openapi_import(tenant=trio.acme, text=PETSTORE_2, operations=["logoutUser", "getInventory"])
    assert caught.value.path == "secret"
    # The configuration compiler refuses the second tool: the first is not kept either.
    bad = PETSTORE_2.replace(
        "          description: The user name for login\n",
        "          description: The user name for login\n          pattern: '(?=x)'\n",
    )
    problems = {t.draft.name: t.problems for t in openapi_preview(tenant=trio.acme, text=bad).tools}
    assert "not supported" in problems["loginUser"][0] and problems["logoutUser"] == ()
    with pytest.raises(ImportRefused, match="input_schema") as caught:
        openapi_import(tenant=trio.acme, text=bad, operations=["logoutUser", "loginUser"])
    assert caught.value.path == "tools.loginUser"
    with pytest.raises(ImportRefused, match="no operation 'nope'"):
        openapi_import(tenant=trio.acme, text=PETSTORE_2, operations=["logoutUser", "nope"])
    with pytest.raises(ImportRefused, match="form data"):
        openapi_import(tenant=trio.acme, text=PETSTORE_2, operations=["uploadFile"])
    with pytest.raises(ImportRefused, match="at least one"):
        openapi_import(tenant=trio.acme, text=PETSTORE_2, operations=[])
    assert not ToolDefinition.objects.exists()
    assert not AuditEntry.objects.filter(action="config.created").exists()


def test_a_reimport_updates_what_changed_and_keeps_what_the_admin_added(trio):
    openapi_import(tenant=trio.acme, text=PETSTORE_2, operations=["getPetById"], secret="k1")
    tool = ToolDefinition.objects.get(name="getPetById")
    tool_definition_save(
        tenant=trio.acme,
        definition=tool,
        changes={"config": {**tool.config, "model_view": {"name": "name"}}, "tags": ["pets"]},
    )
    changed = PETSTORE_2.replace("summary: Find pet by ID", "summary: Find one pet")
    [updated] = openapi_import(tenant=trio.acme, text=changed, operations=["getPetById"])
    assert updated.description.startswith("Find one pet") and updated.version == 3
    assert updated.config["model_view"] == {"name": "name"} and updated.tags == ["pets"]
    assert updated.secret == "k1"  # none given: the stored one stays


def test_a_reimport_keeps_an_admins_argument_reference_and_top_level_references(trio):
    [tool] = openapi_import(
        tenant=trio.acme, text=PETSTORE_2, operations=["getPetById"], secret="k"
    )
    assert tool.config["arguments"] == [{"argument": "petId", "to": "path"}]
    config = {**tool.config, "references": {"id": "pet"},
              "arguments": [{"argument": "petId", "to": "path", "reference": "pet"}]}  # fmt: skip
    tool_definition_save(tenant=trio.acme, definition=tool, changes={"config": config})
    unchanged = openapi_preview(tenant=trio.acme, text=PETSTORE_2)
    assert statuses(unchanged)["getPetById"] == "unchanged"
    changed = PETSTORE_2.replace("summary: Find pet by ID", "summary: Find one pet")
    [by_name] = [t for t in openapi_preview(tenant=trio.acme, text=changed).tools
                 if t.draft.name == "getPetById"]  # fmt: skip
    assert by_name.changes == ("description",)
    [updated] = openapi_import(tenant=trio.acme, text=changed, operations=["getPetById"])
    assert updated.config["arguments"] == [{"argument": "petId", "to": "path", "reference": "pet"}]
    assert updated.config["references"] == {"id": "pet"}
    # The document sends the argument elsewhere now: the target is the document's.
    moved = changed.replace("'/pet/{petId}':", "'/pet/by-id':").replace(
        "          in: path\n          description: ID of pet to return",
        "          in: query\n          description: ID of pet to return",
    )
    [updated] = openapi_import(tenant=trio.acme, text=moved, operations=["getPetById"])
    assert updated.config["arguments"] == [{"argument": "petId", "to": "query"}]


SERVERS = {
    "openapi": "3.0.0",
    "info": {"title": "t", "version": "1"},
    "servers": [{"url": "https://api.example.com"}],
    "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "K"}}},
    "security": [{"key": []}],
    "paths": {
        "/a": {"get": {"operationId": "a", "responses": {"200": {"description": "ok"}}}},
        "/b": {"get": {"operationId": "b", "servers": [{"url": "https://other.example.net"}],
                       "responses": {"200": {"description": "ok"}}}},
    },
}  # fmt: skip


def test_one_secret_is_never_sent_to_two_hosts(trio):
    document = json.dumps(SERVERS)
    [note] = openapi_preview(tenant=trio.acme, text=document).notes
    assert "call 2 hosts (api.example.com, other.example.net)" in note
    with pytest.raises(ImportRefused, match="2 hosts") as caught:
        openapi_import(tenant=trio.acme, text=document, operations=["a", "b"], secret="s")
    assert caught.value.path == "operations"
    assert "api.example.com, other.example.net" in caught.value.message
    assert not ToolDefinition.objects.exists()
    for operation, host in (("a", "api.example.com"), ("b", "other.example.net")):
        [tool] = openapi_import(tenant=trio.acme, text=document, operations=[operation],
                                secret=f"for-{host}")  # fmt: skip
        assert tool.config["url"].startswith(f"https://{host}") and tool.secret == f"for-{host}"
    # Each keeps its own secret when none is given: both may be re-imported at once.
    assert len(openapi_import(tenant=trio.acme, text=document, operations=["a", "b"])) == 2


def test_an_import_compiles_the_configuration_once(trio, monkeypatch):
    import agents.config_saves

    compiled = []
    real = agents.config_saves.compile_config
    monkeypatch.setattr(
        agents.config_saves, "compile_config", lambda *a, **k: compiled.append(1) or real(*a, **k)
    )
    saved = openapi_import(tenant=trio.acme, text=PETSTORE_2, operations=[
        "logoutUser", "deleteOrder", "getOrderById", "deleteUser", "getUserByName"])  # fmt: skip
    assert len(saved) == 5 and len(compiled) == 1  # not once per tool
    assert ToolDefinition.objects.filter(tenant=trio.acme).count() == 5


def test_a_document_is_fetched_through_the_egress_guard(trio, settings):
    spec = (DATA / "tictactoe-3.1.yaml").read_bytes()
    with LocalServer() as server:
        server.route("GET", "/specs/ttt.yaml", Reply(body=spec))
        server.route("GET", "/huge.json", Reply(body=b" " * 2_100_000))
        url = f"{server.url}/specs/ttt.yaml"
        settings.EGRESS_ALLOWLIST = []
        private = "Cannot fetch the document: its URL points to a private or local address."
        # Our words, never the guard's: no address a host name resolved to (internal DNS).
        for refused in (url, url.replace("127.0.0.1", "localhost")):
            with pytest.raises(ImportRefused) as caught:
                openapi_preview(tenant=trio.acme, url=refused)
            assert (caught.value.path, caught.value.message) == ("url", private)
        assert server.requests == []  # refused before connecting
        settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
        preview = openapi_preview(tenant=trio.acme, url=url)
        # No servers in the document: its calls go where it was fetched from.
        assert preview.base_url == f"{server.url}/"
        with pytest.raises(ImportRefused, match="larger than 2 MB"):
            openapi_preview(tenant=trio.acme, url=f"{server.url}/huge.json")
        with pytest.raises(ImportRefused, match="answered HTTP 404"):
            openapi_preview(tenant=trio.acme, url=f"{server.url}/nothing")
    for url, message in (
        (
            "file:///etc/passwd",
            "Cannot fetch the document: its URL must start with http:// or https://.",
        ),
        (
            "ftp://example.com/x",
            "Cannot fetch the document: its URL must start with http:// or https://.",
        ),
        ("https://[::1/x", "Cannot fetch the document: that is not a valid URL."),
        ("https:///x", "Cannot fetch the document: its URL has no host."),
    ):
        with pytest.raises(ImportRefused) as caught:
            openapi_preview(tenant=trio.acme, url=url)
        assert caught.value.message == message
    with pytest.raises(ImportRefused, match="text or its URL"):
        openapi_preview(tenant=trio.acme)


EXTERNAL = {
    "swagger": "2.0",
    "host": "a.example.com",
    "paths": {
        "/a": {
            "get": {
                "parameters": [
                    {"in": "body", "name": "b", "schema": {"$ref": "http://evil.example.com/x"}}
                ]
            }
        }
    },
}
MANY = {
    "openapi": "3.0.0",
    "servers": [{"url": "https://a.example.com"}],
    "paths": {f"/p{i}": {"get": {}} for i in range(501)},
}


@pytest.mark.parametrize(
    "document,match",
    [
        ("a: &a [1, *a]", "contains itself"),
        (json.dumps(EXTERNAL), "outside the document"),
        (json.dumps(MANY), "501 operations"),
    ],
)
def test_hostile_documents_are_refused_and_nothing_is_saved(trio, document, match):
    with pytest.raises(ImportRefused, match=match):
        openapi_import(tenant=trio.acme, text=document, operations=["a"], secret="s")
    assert not ToolDefinition.objects.exists()
