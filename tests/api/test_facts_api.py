"""The facts REST API (/api/v1/facts, agentplatform/api/agents_api.py over agents.memory):
who sees, edits and deletes which remembered fact; edits embedded again; every write
audited without the text; hostile input a clear 400 that leaves the fact intact.

acme: alice (owner), bob (member), dave (member); globex: charlie.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from rest_framework.test import APIClient

from agents.memory import DjangoFactStore, MemorySettings
from agents.models import Fact
from tenancy import services as tenancy
from tenancy.models import AuditEntry, Role
from tests.factories import add_member, login, make_agent, make_user
from tools.runtime.context import RunContext

pytestmark = pytest.mark.django_db
URL = "/api/v1/facts"


@pytest.fixture
def facts(trio):
    dave = make_user("dave")
    add_member(trio.acme, dave, Role.MEMBER)
    desk = make_agent(trio.acme, "desk", memory=True, memory_scope="agent")
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="portal", scopes=["read", "write"])
    made = {
        "bob": Fact.objects.create(tenant=trio.acme, user=trio.bob, text="Bob likes tea."),
        "dave": Fact.objects.create(tenant=trio.acme, user=dave, text="Dave likes chess."),
        "alice": Fact.objects.create(tenant=trio.acme, user=trio.alice, text="Alice runs."),
        "desk": Fact.objects.create(tenant=trio.acme, scope="agent", agent=desk, text="Opens 9."),
        "all": Fact.objects.create(tenant=trio.acme, scope="tenant", text="Closed Sundays."),
        "key": Fact.objects.create(tenant=trio.acme, scope="key", api_key=key, text="Dutch."),
        "globex": Fact.objects.create(tenant=trio.globex, user=trio.charlie, text="Charlie."),
    }
    return trio, dave, key, made


def session(user, tenant="acme") -> APIClient:
    return login(APIClient(), user, tenant=tenant)


def keyed(tenant, scopes) -> APIClient:
    _, plain = tenancy.api_key_create(tenant=tenant, name="-".join(scopes), scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def listed(client, query: str = "") -> set[str]:
    response = client.get(URL + query)
    assert response.status_code == 200, response.content
    return {fact["text"] for fact in response.json()["results"]}


def test_a_member_sees_only_what_is_remembered_about_them(facts):
    trio, dave, _, made = facts
    assert listed(session(trio.bob)) == {"Bob likes tea."}
    assert listed(session(dave)) == {"Dave likes chess."}
    bob = session(trio.bob)
    for name in ("dave", "alice", "desk", "all", "key", "globex"):  # never theirs: 404
        url = f"{URL}/{made[name].pk}"
        assert bob.get(url).status_code == 404, name
        assert bob.patch(url, {"text": "mine now"}, format="json").status_code == 404, name
        assert bob.delete(url).status_code == 404, name
    assert Fact.objects.count() == len(made)
    assert bob.get(f"{URL}/{made['bob'].pk}").json()["scope"] == "person"


def test_an_admin_sees_and_governs_the_shared_facts_but_not_other_peoples(facts):
    trio, _, _, made = facts
    alice = session(trio.alice)
    assert listed(alice) == {"Alice runs.", "Opens 9.", "Closed Sundays.", "Dutch."}
    assert listed(alice, "?scope=agent") == {"Opens 9."}
    assert alice.get(URL + "?scope=nope").status_code == 400
    for name in ("bob", "dave"):
        assert alice.get(f"{URL}/{made[name].pk}").status_code == 404
        assert alice.delete(f"{URL}/{made[name].pk}").status_code == 404
    shown = alice.get(f"{URL}/{made['desk'].pk}").json()
    assert (shown["scope"], shown["agent"], shown["user"]) == ("agent", "desk", None)
    response = alice.patch(f"{URL}/{made['desk'].pk}", {"text": "Opens at 8."}, format="json")
    assert response.status_code == 200 and response.json()["edited_by"] == "alice"
    assert alice.delete(f"{URL}/{made['all'].pk}").status_code == 204
    assert not Fact.objects.filter(pk=made["all"].pk).exists()
    assert session(trio.charlie, "globex").get(f"{URL}/{made['desk'].pk}").status_code == 404


def test_keys_see_their_own_facts_and_an_admin_key_every_fact(facts):
    trio, _, _, made = facts
    assert listed(keyed(trio.acme, ["read"])) == set()  # a key owns none but its own
    assert listed(keyed(trio.acme, ["admin"])) == {f.text for n, f in made.items() if n != "globex"}
    assert listed(keyed(trio.acme, ["admin"]), f"?user={trio.bob.pk}") == {"Bob likes tea."}
    assert listed(keyed(trio.globex, ["admin"])) == {"Charlie."}


def test_editing_embeds_the_new_text_so_recall_finds_it_by_meaning(facts):
    trio, _, _, made = facts
    fact = made["bob"]
    bob = session(trio.bob)
    response = bob.patch(f"{URL}/{fact.pk}", {"text": "  Drives a blue Toyota.  "}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["text"], body["user"], body["edited_by"]) == (
        "Drives a blue Toyota.",
        trio.bob.pk,
        "bob",
    )
    fact.refresh_from_db()
    assert fact.embedder and fact.embedding is not None and fact.edited_at is not None
    store = DjangoFactStore(MemorySettings.default())
    found = async_to_sync(store.recall)(
        ctx=RunContext(trio.acme.pk, user_id=trio.bob.pk), query="car", limit=1
    )
    assert found == [{"id": str(fact.pk), "text": "Drives a blue Toyota."}]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"text": ""},
        {"text": "   "},
        {"text": 5},
        {"text": ["a"]},
        {"text": "x" * 1001},
        {"text": "a\x00b"},
        {"text": "Mine.", "user": 99},  # its text only
    ],
)
def test_a_bad_edit_is_a_400_and_leaves_the_fact(facts, body):
    trio, _, _, made = facts
    response = session(trio.bob).patch(f"{URL}/{made['bob'].pk}", body, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()["error"]["details"]) & {"text", "user"}
    made["bob"].refresh_from_db()
    assert made["bob"].text == "Bob likes tea."
    assert not AuditEntry.objects.filter(action="fact.edited").exists()


def test_odd_ids_and_methods_answer_cleanly(facts):
    trio = facts[0]
    bob = session(trio.bob)
    for fact_id in ("nope", "99999999999999999999999", "-1", "0"):
        assert bob.get(f"{URL}/{fact_id}").status_code == 404
    assert bob.post(URL, {"text": "x"}, format="json").status_code == 405
    assert bob.put(f"{URL}/{facts[3]['bob'].pk}", {"text": "x"}, format="json").status_code == 405


def test_edits_and_deletions_are_audited_with_who_and_never_the_text(facts):
    trio, _, _, made = facts
    bob = session(trio.bob)
    bob.patch(f"{URL}/{made['bob'].pk}", {"text": "Bob likes coffee now."}, format="json")
    bob.delete(f"{URL}/{made['bob'].pk}")
    entries = AuditEntry.objects.filter(object_type="agents.fact").order_by("id")
    assert [(e.action, e.user, e.object_id) for e in entries] == [
        ("fact.edited", trio.bob, str(made["bob"].pk)),
        ("fact.forgotten", trio.bob, str(made["bob"].pk)),
    ]
    for entry in entries:
        text = f"{entry.details} {entry.changes} {entry.object_repr}".lower()
        assert "tea" not in text and "coffee" not in text


def test_a_viewer_reads_their_facts_but_may_not_change_them(facts):
    trio, dave, _, made = facts
    tenancy_membership = dave.memberships.get(tenant=trio.acme)
    tenancy_membership.role = Role.VIEWER
    tenancy_membership.save()
    viewer = session(dave)
    assert listed(viewer) == {"Dave likes chess."}
    url = f"{URL}/{made['dave'].pk}"
    assert viewer.patch(url, {"text": "no"}, format="json").status_code == 403
    assert viewer.delete(url).status_code == 403
