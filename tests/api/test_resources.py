"""REST resources: agents, crews, conversations (+ messages) and facts.

The helpers here (`Api`, `key_for`) are shared by the other test_resources_* modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.models import Agent, Conversation, Crew, Fact, Message
from tenancy import services
from tenancy.models import ApiKey, Tenant
from tests.factories import login, make_agent, make_connection

V1 = "/api/v1"


def key_for(tenant: Tenant, *scopes: str, name: str = "test", created_by=None) -> str:
    """A new API key of `tenant` with `scopes` (default: read, write and config)."""
    _, full = services.api_key_create(
        tenant=tenant,
        name=name,
        scopes=list(scopes or ("read", "write", "config")),
        created_by=created_by,
    )
    return full


@dataclass
class Api:
    """Django's test client speaking JSON as an API key or a logged-in user."""

    client: Any
    key: str | None = None
    tenant_header: str | None = None
    bodies: list[str] = field(default_factory=list)  # every response body, for secret scans

    def _headers(self) -> dict[str, str]:
        headers = {}
        if self.key is not None:
            headers["HTTP_AUTHORIZATION"] = f"Bearer {self.key}"
        if self.tenant_header is not None:
            headers["HTTP_X_TENANT"] = self.tenant_header
        return headers

    def _record(self, response):
        self.bodies.append(response.content.decode())
        return response

    def get(self, path: str, params: dict | None = None):
        return self._record(self.client.get(V1 + path, params or {}, **self._headers()))

    def post(self, path: str, data: Any = None, raw: str | None = None):
        import json

        body = raw if raw is not None else json.dumps(data if data is not None else {})
        return self._record(
            self.client.post(V1 + path, body, content_type="application/json", **self._headers())
        )

    def patch(self, path: str, data: Any):
        return self._record(
            self.client.patch(V1 + path, data, content_type="application/json", **self._headers())
        )

    def put(self, path: str, data: Any):
        return self._record(
            self.client.put(V1 + path, data, content_type="application/json", **self._headers())
        )

    def delete(self, path: str):
        return self._record(self.client.delete(V1 + path, **self._headers()))


def as_key(client, tenant: Tenant, *scopes: str) -> Api:
    return Api(client, key_for(tenant, *scopes))


def assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


# -- agents ----------------------------------------------------------------------------------
def test_agents_crud_by_slug(client, trio):
    api = as_key(client, trio.acme)
    created = api.post(
        "/agents",
        {
            "slug": "support",
            "name": "Support",
            "instructions": "Be kind.",
            "tool_names": ["calculator"],
            "use_all_tools": False,
        },
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["slug"] == "support" and body["tool_names"] == ["calculator"]
    assert body["has_remote_token"] is False and "remote_token" not in body

    assert api.get("/agents/support").json()["instructions"] == "Be kind."
    listed = api.get("/agents").json()
    assert [a["slug"] for a in listed["results"]] == ["support"]

    patched = api.patch("/agents/support", {"temperature": 0.5})
    assert patched.status_code == 200 and patched.json()["temperature"] == 0.5
    replaced = api.put("/agents/support", {"slug": "support", "name": "Help desk"})
    assert replaced.status_code == 200 and replaced.json()["name"] == "Help desk"
    assert replaced.json()["instructions"] == "Be kind."  # left out: kept
    assert "slug" in assert_error(api.put("/agents/support", {"name": "No slug"}), 400)["details"]

    assert api.delete("/agents/support").status_code == 204
    assert_error(api.get("/agents/support"), 404, "not_found")
    assert not Agent.objects.filter(tenant=trio.acme).exists()


def test_agent_validation_uses_the_model_rules(client, trio):
    api = as_key(client, trio.acme)
    bad = api.post("/agents", {"slug": "x", "name": "X", "temperature": 3})
    assert assert_error(bad, 400, "invalid")["details"] == {"temperature": ["Between 0 and 2."]}
    bad = api.post("/agents", {"slug": "r", "name": "R", "kind": "remote"})
    assert "remote_url" in assert_error(bad, 400)["details"]
    bad = api.post("/agents", {"slug": "Bad Slug!", "name": "X"})
    assert "slug" in assert_error(bad, 400)["details"]
    bad = api.post("/agents", {"slug": "s", "name": "S", "output_schema": {"type": "string"}})
    assert "output_schema" in assert_error(bad, 400)["details"]


def test_an_agent_may_be_set_to_answer_from_tool_results_without_tools(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/agents", {"slug": "reader", "name": "Reader"})
    assert created.json()["results_without_tools"] is False
    patched = api.patch("/agents/reader", {"results_without_tools": True})
    assert patched.status_code == 200 and patched.json()["results_without_tools"] is True
    assert Agent.objects.get(tenant=trio.acme, slug="reader").results_without_tools is True
    bad = api.patch("/agents/reader", {"results_without_tools": "sometimes"})
    assert "results_without_tools" in assert_error(bad, 400)["details"]


def test_agent_slug_is_unique_per_tenant_only(client, trio):
    make_agent(trio.globex, "support")
    api = as_key(client, trio.acme)
    assert api.post("/agents", {"slug": "support", "name": "S"}).status_code == 201
    duplicate = api.post("/agents", {"slug": "support", "name": "Again"})
    assert_error(duplicate, 400)


def test_agent_provider_connection_must_be_the_tenants(client, trio):
    ours, theirs = make_connection(trio.acme, "Ours"), make_connection(trio.globex, "Theirs")
    api = as_key(client, trio.acme)
    bad = api.post("/agents", {"slug": "a", "name": "A", "provider_connection": theirs.pk})
    assert "provider_connection" in assert_error(bad, 400)["details"]
    good = api.post("/agents", {"slug": "a", "name": "A", "provider_connection": ours.pk})
    assert good.status_code == 201 and good.json()["provider_connection"] == ours.pk


def test_agent_list_filters(client, trio):
    make_agent(trio.acme, "on")
    make_agent(trio.acme, "off", active=False)
    make_agent(trio.acme, "far", kind="remote", remote_url="https://agents.example.com")
    api = as_key(client, trio.acme)

    def slugs(params):
        return sorted(a["slug"] for a in api.get("/agents", params).json()["results"])

    assert slugs({"active": "true"}) == ["far", "on"]
    assert slugs({"active": "false"}) == ["off"]
    assert slugs({"kind": "remote"}) == ["far"]
    assert_error(api.get("/agents", {"active": "maybe"}), 400)


def test_agent_remote_token_is_write_only(client, trio):
    api = as_key(client, trio.acme)
    body = {
        "slug": "far",
        "name": "Far",
        "kind": "remote",
        "remote_url": "https://agents.example.com",
        "remote_token": "remote-SECRET-token",
    }
    created = api.post("/agents", body)
    assert created.status_code == 201 and created.json()["has_remote_token"] is True
    api.patch("/agents/far", {"name": "Farther"})  # omitted: kept
    assert Agent.objects.get(slug="far").remote_token == "remote-SECRET-token"
    assert api.patch("/agents/far", {"remote_token": None}).json()["has_remote_token"] is False
    assert not any("remote-SECRET-token" in b for b in api.bodies)


def test_list_pagination_cursor_walks_every_agent_once(client, trio):
    for n in range(7):
        make_agent(trio.acme, f"a{n}")
    api = as_key(client, trio.acme)
    seen, page = [], api.get("/agents", {"limit": 3}).json()
    while True:
        seen += [a["slug"] for a in page["results"]]
        if not page["next"]:
            break
        page = api.client.get(page["next"], HTTP_AUTHORIZATION=f"Bearer {api.key}").json()
    assert sorted(seen) == [f"a{n}" for n in range(7)] and len(seen) == 7
    assert_error(api.get("/agents", {"cursor": "not-a-cursor"}), 404)
    import base64

    tampered = base64.b64encode(b"p=abc").decode()
    assert_error(api.get("/agents", {"cursor": tampered}), 404)


# -- crews -----------------------------------------------------------------------------------
def test_crews_crud_with_ordered_members(client, trio):
    for slug in ("researcher", "writer", "editor"):
        make_agent(trio.acme, slug)
    api = as_key(client, trio.acme)
    created = api.post(
        "/crews", {"slug": "team", "name": "Team", "members": ["writer", "researcher"]}
    )
    assert created.status_code == 201, created.content
    assert created.json()["members"] == ["writer", "researcher"]

    patched = api.patch("/crews/team", {"members": ["editor", "writer", "researcher"]})
    assert patched.json()["members"] == ["editor", "writer", "researcher"]
    assert api.patch("/crews/team", {"name": "A-team"}).json()["members"] == [
        "editor",
        "writer",
        "researcher",
    ]
    assert api.get("/crews").json()["results"][0]["members"] == ["editor", "writer", "researcher"]

    hierarchical = api.patch("/crews/team", {"mode": "hierarchical"})
    assert "manager" in assert_error(hierarchical, 400)["details"]
    managed = api.patch("/crews/team", {"mode": "hierarchical", "manager": "editor"})
    assert managed.status_code == 200 and managed.json()["manager"] == "editor"

    assert api.delete("/crews/team").status_code == 204
    assert not Crew.objects.filter(tenant=trio.acme).exists()


def test_crew_members_and_manager_must_be_the_tenants_agents(client, trio):
    make_agent(trio.acme, "mine")
    make_agent(trio.globex, "theirs")
    api = as_key(client, trio.acme)
    bad = api.post("/crews", {"slug": "c", "name": "C", "members": ["mine", "theirs"]})
    assert "theirs" in assert_error(bad, 400)["details"]["members"][0]
    twice = api.post("/crews", {"slug": "c", "name": "C", "members": ["mine", "mine"]})
    assert "members" in assert_error(twice, 400)["details"]
    manager = api.post("/crews", {"slug": "c", "name": "C", "manager": "theirs"})
    assert "manager" in assert_error(manager, 400)["details"]


# -- conversations ---------------------------------------------------------------------------
def test_conversations_are_the_callers_own(client, trio):
    agent = make_agent(trio.acme, "support")
    mine, other = as_key(client, trio.acme), as_key(client, trio.acme)
    created = mine.post("/conversations", {"agent": "support", "title": "Orders"})
    assert created.status_code == 201, created.content
    conversation_id = created.json()["id"]
    assert created.json()["agent"] == "support"
    conversation = Conversation.objects.get(pk=conversation_id)
    assert conversation.owner_api_key.prefix in mine.key

    assert [c["id"] for c in mine.get("/conversations").json()["results"]] == [conversation_id]
    assert other.get("/conversations").json()["results"] == []
    assert_error(other.get(f"/conversations/{conversation_id}"), 404)
    assert_error(other.get(f"/conversations/{conversation_id}/messages"), 404)
    assert_error(other.delete(f"/conversations/{conversation_id}"), 404)

    Message.objects.create(tenant=trio.acme, conversation=conversation, role="user", content="hi")
    Message.objects.create(
        tenant=trio.acme, conversation=conversation, role="assistant", content="hello"
    )
    messages = mine.get(f"/conversations/{conversation_id}/messages").json()["results"]
    assert [m["content"] for m in messages] == ["hi", "hello"]  # oldest first
    assert mine.get("/conversations", {"agent": "other"}).json()["results"] == []
    assert mine.get("/conversations", {"agent": agent.slug}).json()["results"]

    assert mine.delete(f"/conversations/{conversation_id}").status_code == 204
    assert not Conversation.objects.filter(pk=conversation_id).exists()


def test_conversation_needs_exactly_one_agent_or_crew(client, trio):
    make_agent(trio.acme, "support")
    make_agent(trio.globex, "theirs")
    api = as_key(client, trio.acme)
    assert_error(api.post("/conversations", {}), 400)
    assert_error(api.post("/conversations", {"agent": "theirs"}), 400)
    messages_are_read_only = api.post("/conversations/1/messages", {"content": "x"})
    assert messages_are_read_only.status_code in (404, 405)


def test_session_user_lists_agents_with_the_tenant_header(client, trio):
    make_agent(trio.acme, "support")
    make_agent(trio.globex, "theirs")
    login(client, trio.bob)
    api = Api(client, tenant_header="acme")
    assert [a["slug"] for a in api.get("/agents").json()["results"]] == ["support"]
    created = api.post("/conversations", {"agent": "support"})
    assert created.status_code == 201
    assert Conversation.objects.get(pk=created.json()["id"]).owner_user == trio.bob
    assert_error(Api(client, tenant_header="globex").get("/agents"), 404)  # not a member
    assert_error(Api(client).get("/agents"), 404)  # no tenant named


def test_session_viewer_may_read_but_not_write(client, trio):
    from tests.factories import add_member, make_user

    viewer = make_user("vera")
    add_member(trio.acme, viewer, "viewer")
    login(client, viewer)
    api = Api(client, tenant_header="acme")
    assert api.get("/agents").status_code == 200
    assert_error(api.post("/agents", {"slug": "x", "name": "X"}), 403, "permission_denied")


# -- facts -----------------------------------------------------------------------------------
def test_session_users_see_and_forget_their_own_facts(client, trio):
    alice_fact = Fact.objects.create(tenant=trio.acme, user=trio.alice, text="likes tea")
    bob_fact = Fact.objects.create(tenant=trio.acme, user=trio.bob, text="likes coffee")
    login(client, trio.bob)
    api = Api(client, tenant_header="acme")
    assert [f["text"] for f in api.get("/facts").json()["results"]] == ["likes coffee"]
    assert_error(api.get(f"/facts/{alice_fact.pk}"), 404)
    assert_error(api.delete(f"/facts/{alice_fact.pk}"), 404)
    assert api.delete(f"/facts/{bob_fact.pk}").status_code == 204
    assert list(Fact.objects.values_list("text", flat=True)) == ["likes tea"]


def test_api_keys_need_admin_for_facts_and_filter_by_user(client, trio):
    """Facts are their users' alone: a key owns none, and only an admin-scope key reads
    the users' facts."""
    alices = Fact.objects.create(tenant=trio.acme, user=trio.alice, text="likes tea")
    Fact.objects.create(tenant=trio.acme, user=trio.bob, text="likes coffee")
    Fact.objects.create(tenant=trio.globex, user=trio.charlie, text="globex secret")
    reader = as_key(client, trio.acme, "read", "write")
    assert reader.get("/facts").json()["results"] == []
    assert_error(reader.get(f"/facts/{alices.pk}"), 404)
    assert_error(reader.delete(f"/facts/{alices.pk}"), 404)
    assert Fact.objects.filter(pk=alices.pk).exists()
    admin = as_key(client, trio.acme, "admin")
    texts = sorted(f["text"] for f in admin.get("/facts").json()["results"])
    assert texts == ["likes coffee", "likes tea"]
    only_bob = admin.get("/facts", {"user": trio.bob.pk}).json()["results"]
    assert [f["text"] for f in only_bob] == ["likes coffee"]
    assert_error(admin.get("/facts", {"user": "bob"}), 400)


def test_revoked_key_is_refused(client, trio):
    full = key_for(trio.acme, "read")
    api = Api(client, full)
    assert api.get("/agents").status_code == 200
    services.api_key_revoke(key=ApiKey.objects.get(prefix=full.split("_")[1]))
    assert_error(api.get("/agents"), 401)
