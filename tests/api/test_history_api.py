"""REST: `/api/v1/<kind>/<key>/versions[/<n>[/restore]]` — versions of REST saves, restore
through the same checks, roles and scopes, other tenants' objects 404, never a secret."""

from __future__ import annotations

from django.test import Client

from agents.models import Agent
from providers.models import ProviderConnection
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login
from tools.services import tool_definition_save

KEY = "sk-ant-api03-HISTORY-SECRET"


def _agent(api: Api) -> None:
    created = api.post(
        "/agents",
        {"slug": "support", "name": "Support", "instructions": "Be kind.", "tool_names": []},
    )
    assert created.status_code == 201, created.content
    assert api.patch("/agents/support", {"instructions": "Be brief."}).status_code == 200


def test_rest_saves_are_versions_listed_read_and_restored(client, trio):
    api = as_key(client, trio.acme)
    _agent(api)
    listed = api.get("/agents/support/versions")
    assert listed.status_code == 200, listed.content
    versions = listed.json()
    assert [v["number"] for v in versions] == [2, 1]
    assert versions[0]["changes"] == {"instructions": ["Be kind.", "Be brief."]}
    assert versions[0]["actor_label"].startswith("API key test")
    one = api.get("/agents/support/versions/1").json()
    assert one["snapshot"]["fields"]["instructions"] == "Be kind."

    restored = api.post("/agents/support/versions/1/restore")
    assert restored.status_code == 200, restored.content
    assert restored.json()["number"] == 3 and restored.json()["restored_from"] == 1
    assert Agent.objects.get(tenant=trio.acme, slug="support").instructions == "Be kind."
    again = api.post("/agents/support/versions/3/restore")
    assert_error(again, 400)
    assert "Nothing to restore" in again.content.decode()


def test_connection_versions_never_carry_the_key_and_restore_keeps_it(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/provider-connections", {"name": "C", "kind": "anthropic", "api_key": KEY})
    pk = created.json()["id"]
    api.patch(f"/provider-connections/{pk}", {"api_key": "sk-rotated-" + KEY, "timeout_s": 5})
    versions = api.get(f"/provider-connections/{pk}/versions").json()
    assert versions[1]["snapshot"]["fields"]["api_key"] == "[set]"
    assert "api_key" not in versions[0]["changes"]  # a new secret is no visible change
    assert api.post(f"/provider-connections/{pk}/versions/1/restore").status_code == 200
    stored = ProviderConnection.objects.get(pk=pk)
    assert stored.timeout_s == 60.0 and stored.api_key == "sk-rotated-" + KEY
    assert not any(KEY in body for body in api.bodies)


def test_tools_are_named_by_name_and_knowledge_bases_by_slug(client, trio):
    tool_definition_save(
        tenant=trio.acme,
        changes={"name": "adder", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    api = as_key(client, trio.acme)
    assert [v["number"] for v in api.get("/tools/adder/versions").json()] == [1]
    created = api.post("/knowledge-bases", {"name": "Docs", "slug": "docs", "embedder": "lexical"})
    assert created.status_code == 201, created.content
    assert api.get("/knowledge-bases/docs/versions/1").status_code == 200


def test_a_restore_that_is_invalid_now_is_a_400_and_changes_nothing(client, trio):
    api = as_key(client, trio.acme)
    tool_definition_save(
        tenant=trio.acme,
        changes={"name": "adder", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    api.post("/agents", {"slug": "a", "name": "A", "tool_names": ["adder"]})
    api.patch("/agents/a", {"tool_names": []})
    assert api.delete("/tools/adder").status_code == 204
    refused = api.post("/agents/a/versions/1/restore")
    error = assert_error(refused, 400)
    assert "adder" in str(error)
    assert Agent.objects.get(tenant=trio.acme, slug="a").tool_names == []
    assert len(api.get("/agents/a/versions").json()) == 2


def test_scopes_roles_and_other_tenants(client, trio):
    _agent(as_key(client, trio.acme))
    reader = as_key(client, trio.acme, "read")
    assert reader.get("/agents/support/versions").status_code == 200
    assert_error(reader.post("/agents/support/versions/1/restore"), 403)
    # A member's session reads configuration but may not change it.
    member = Api(login(Client(), trio.bob), tenant_header="acme")
    assert member.get("/agents/support/versions").status_code == 200
    assert_error(member.post("/agents/support/versions/1/restore"), 403)
    # globex's key: acme's agent does not exist for it.
    outsider = as_key(client, trio.globex)
    for path in ("/agents/support/versions", "/agents/support/versions/1"):
        assert_error(outsider.get(path), 404)
    assert_error(outsider.post("/agents/support/versions/1/restore"), 404)
    assert Agent.objects.get(tenant=trio.acme, slug="support").instructions == "Be brief."


def test_missing_versions_and_odd_paths_are_404(client, trio):
    api = as_key(client, trio.acme)
    _agent(api)
    for path in (
        "/agents/support/versions/9",
        "/agents/support/versions/0",
        "/agents/support/versions/x",
        "/agents/nobody/versions",
        "/provider-connections/x/versions",
    ):
        assert_error(api.get(path), 404)
    assert_error(api.post("/agents/support/versions/99999999999999999999/restore"), 404)
