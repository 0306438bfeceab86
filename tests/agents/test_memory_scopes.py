"""Memory's scopes, expiry and audit on the real PostgreSQL, through the production store
(agents/memory/): what a run of each kind reads and writes, by words and by meaning (the
embedder the platform registered), and the walls between people, agents, keys and tenants.

acme: alice (owner), bob and dave (members); globex: charlie. Agents of acme: `pal` (each
person's memory), `desk` (the agent's, shared), `hub` (the tenant's), `kiosk` (person
scope, memory for key runs too).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.memory import (
    DjangoFactStore,
    MemorySettings,
    fact_embedder,
    facts_expired_purge,
    memory_tools_for_agent,
    reach_of,
)
from agents.models import Fact, FactScope
from agents.tasks import purge_expired_facts
from tenancy import rls
from tenancy import services as tenancy
from tenancy.models import ApiKey, AuditEntry, Role
from tests.factories import add_member, make_agent, make_user
from tools.runtime.context import RunContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(trio):
    dave = make_user("dave")
    add_member(trio.acme, dave, Role.MEMBER)
    agents = {
        "pal": make_agent(trio.acme, "pal", memory=True),
        "desk": make_agent(trio.acme, "desk", memory=True, memory_scope="agent"),
        "hub": make_agent(trio.acme, "hub", memory=True, memory_scope="tenant"),
        "kiosk": make_agent(trio.acme, "kiosk", memory=True, memory_key_runs=True),
        "globex": make_agent(trio.globex, "pal", memory=True, memory_scope="tenant"),
    }
    keys = {}
    for name in ("portal", "other"):
        key, _ = tenancy.api_key_create(tenant=trio.acme, name=name, scopes=["read", "run"])
        keys[name] = key
    return trio, dave, agents, keys


def as_person(agent, user) -> RunContext:
    return RunContext(agent.tenant_id, user_id=user.pk)


def as_key(agent, key: ApiKey) -> RunContext:
    return RunContext(agent.tenant_id, api_key_id=key.pk)


def remember(agent, ctx: RunContext, text: str) -> Fact:
    store = DjangoFactStore(MemorySettings.of(agent))
    return Fact.objects.get(pk=async_to_sync(store.remember)(ctx=ctx, text=text))


def recall(agent, ctx: RunContext, query: str = "") -> list[str]:
    store = DjangoFactStore(MemorySettings.of(agent))
    found = async_to_sync(store.recall)(ctx=ctx, query=query, limit=50)
    return [fact["text"] for fact in found]


def forget(agent, ctx: RunContext, fact: Fact) -> bool:
    store = DjangoFactStore(MemorySettings.of(agent))
    return async_to_sync(store.forget)(ctx=ctx, fact_id=str(fact.pk))


def test_the_platform_recalls_by_meaning_here():
    assert fact_embedder() is not None  # so "by meaning" below is the production model's


def test_a_persons_facts_reach_only_their_own_runs(world):
    trio, dave, agents, keys = world
    pal, kiosk = agents["pal"], agents["kiosk"]
    fact = remember(pal, as_person(pal, trio.bob), "Has a beagle named Biscuit.")
    assert (fact.scope, fact.user, fact.agent, fact.api_key) == ("person", trio.bob, pal, None)

    for query in ("beagle", "pets", ""):  # words, meaning, the latest
        assert recall(pal, as_person(pal, trio.bob), query) == ["Has a beagle named Biscuit."]
        assert recall(kiosk, as_person(kiosk, trio.bob), query) == [fact.text]  # his, anywhere
        for agent, user in ((pal, dave), (pal, trio.alice), (agents["hub"], dave)):
            assert recall(agent, as_person(agent, user), query) == [], (agent, user, query)
        assert recall(kiosk, as_key(kiosk, keys["portal"]), query) == []  # a key: never his
    assert forget(pal, as_person(pal, dave), fact) is False
    assert forget(pal, as_person(pal, trio.bob), fact) is True


def test_agent_scope_is_shared_by_the_people_using_that_agent_only(world):
    trio, dave, agents, _ = world
    desk, pal = agents["desk"], agents["pal"]
    shared = remember(desk, as_person(desk, trio.bob), "The printer code is 4711.")
    own = remember(pal, as_person(pal, trio.bob), "Bob prefers short answers.")
    assert (shared.scope, shared.agent, shared.user) == ("agent", desk, None)

    assert recall(desk, as_person(desk, dave), "printer") == ["The printer code is 4711."]
    assert recall(desk, as_person(desk, dave), "") == [shared.text]  # not bob's own
    assert set(recall(desk, as_person(desk, trio.bob), "")) == {shared.text, own.text}
    assert recall(pal, as_person(pal, dave), "printer") == []  # another agent's: not shared
    assert recall(agents["hub"], as_person(agents["hub"], dave), "printer") == []


def test_tenant_scope_reaches_the_tenants_tenant_scoped_agents_only(world):
    trio, dave, agents, _ = world
    hub = agents["hub"]
    fact = remember(hub, as_person(hub, trio.alice), "The office closes at six.")
    assert (fact.scope, fact.user, fact.api_key) == ("tenant", None, None)

    assert recall(hub, as_person(hub, dave), "office hours") == [fact.text]  # by meaning
    assert recall(agents["desk"], as_person(agents["desk"], dave), "office") == []
    assert recall(agents["pal"], as_person(agents["pal"], dave), "office") == []
    theirs = agents["globex"]
    assert recall(theirs, as_person(theirs, trio.charlie), "office") == []  # another tenant


def test_a_keys_runs_keep_the_keys_own_memory_when_the_agent_allows_it(world):
    trio, _, agents, keys = world
    kiosk, pal = agents["kiosk"], agents["pal"]
    bobs = remember(kiosk, as_person(kiosk, trio.bob), "Bob's locker is 12.")
    fact = remember(kiosk, as_key(kiosk, keys["portal"]), "The portal's users speak Dutch.")
    assert (fact.scope, fact.api_key, fact.user) == ("key", keys["portal"], None)

    assert recall(kiosk, as_key(kiosk, keys["portal"]), "language") == [fact.text]
    # never a person's: by words or meaning, only the key's own come back
    assert recall(kiosk, as_key(kiosk, keys["portal"]), "locker number") == [fact.text]
    assert recall(kiosk, as_key(kiosk, keys["other"]), "") == []  # another key's
    assert recall(kiosk, as_person(kiosk, trio.bob), "") == [bobs.text]  # never the key's
    for agent in (pal, agents["desk"]):  # agents that keep no memory for keys
        assert not DjangoFactStore(MemorySettings.of(agent)).serves(as_key(agent, keys["portal"]))
    nobody = RunContext(trio.acme.pk)
    assert not DjangoFactStore(MemorySettings.of(kiosk)).serves(nobody)


def test_the_reach_as_sql_and_as_a_filter_agree(world):
    trio, dave, agents, keys = world
    past = timezone.now() - timedelta(seconds=1)
    rows = [
        Fact.objects.create(tenant=trio.acme, user=trio.bob, text="bob"),
        Fact.objects.create(tenant=trio.acme, user=dave, text="dave"),
        Fact.objects.create(tenant=trio.acme, user=trio.bob, text="old", expires_at=past),
        Fact.objects.create(tenant=trio.acme, scope="agent", agent=agents["desk"], text="desk"),
        Fact.objects.create(tenant=trio.acme, scope="agent", agent=agents["hub"], text="hub"),
        Fact.objects.create(tenant=trio.acme, scope="tenant", text="all"),
        Fact.objects.create(tenant=trio.acme, scope="key", api_key=keys["portal"], text="key"),
        Fact.objects.create(tenant=trio.acme, scope="key", api_key=keys["other"], text="other"),
        Fact.objects.create(tenant=trio.globex, scope="tenant", text="globex"),
    ]
    expected = {
        ("pal", "bob"): {"bob"},
        ("desk", "bob"): {"bob", "desk"},
        ("hub", "dave"): {"dave", "hub", "all"},
        ("kiosk", "portal"): {"key"},
    }
    for (agent_name, who), texts in expected.items():
        agent = agents[agent_name]
        people = {"bob": trio.bob, "dave": dave}
        ctx = as_key(agent, keys[who]) if who in keys else as_person(agent, people[who])
        reach = reach_of(MemorySettings.of(agent), ctx)
        by_filter = set(Fact.objects.filter(reach.q()).values_list("text", flat=True))
        where, params = reach.sql("f")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT f.text FROM agents_fact f WHERE {where}", params)  # noqa: S608
            by_sql = {row[0] for row in cursor.fetchall()}
        assert by_filter == by_sql == texts, (agent_name, who)
    assert len(rows) == 9


def test_facts_expire_after_the_agents_retention_and_are_never_recalled_then(world):
    trio, _, agents, _ = world
    pal = agents["pal"]
    pal.memory_retention_days = 30
    pal.save()
    fact = remember(pal, as_person(pal, trio.bob), "Has a beagle named Biscuit.")
    assert timedelta(days=29) < fact.expires_at - timezone.now() <= timedelta(days=30)
    kept = remember(agents["kiosk"], as_person(agents["kiosk"], trio.bob), "Works as a nurse.")
    assert kept.expires_at is None  # another agent's retention: none

    Fact.objects.filter(pk=fact.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    # by words, by meaning (every fact is some distance away), the latest: never it
    for query in ("beagle", "pets", ""):
        assert recall(pal, as_person(pal, trio.bob), query) == [kept.text], query
    assert forget(pal, as_person(pal, trio.bob), fact) is False  # expired: out of reach too


def test_the_purge_deletes_expired_facts_in_batches_and_audits_each_tenants(world):
    trio = world[0]
    past = timezone.now() - timedelta(minutes=1)
    for n in range(5):
        Fact.objects.create(tenant=trio.acme, user=trio.bob, text=f"secret {n}", expires_at=past)
    Fact.objects.create(tenant=trio.globex, user=trio.charlie, text="secret g", expires_at=past)
    later = Fact.objects.create(
        tenant=trio.acme, user=trio.bob, text="later", expires_at=timezone.now() + timedelta(days=1)
    )
    kept = Fact.objects.create(tenant=trio.acme, user=trio.bob, text="kept")

    assert facts_expired_purge(batch=2) == 6
    assert set(Fact.objects.values_list("pk", flat=True)) == {later.pk, kept.pk}
    entries = AuditEntry.objects.filter(action="facts.expired")
    assert sum(e.details["count"] for e in entries.filter(tenant=trio.acme)) == 5
    assert sum(e.details["count"] for e in entries.filter(tenant=trio.globex)) == 1
    assert all("secret" not in str(e.details) + e.object_repr for e in entries)
    assert facts_expired_purge(batch=2) == 0


def test_remembering_and_forgetting_are_audited_without_the_text(world):
    trio, _, agents, keys = world
    pal, kiosk = agents["pal"], agents["kiosk"]
    fact = remember(pal, as_person(pal, trio.bob), "Allergic to peanuts.")
    keyed = remember(kiosk, as_key(kiosk, keys["portal"]), "Portal users want PDFs.")
    forget(pal, as_person(pal, trio.bob), fact)

    entries = AuditEntry.objects.filter(object_type="agents.fact").order_by("id")
    assert [(e.action, e.object_id, e.actor_label) for e in entries] == [
        ("fact.remembered", str(fact.pk), "agent pal"),
        ("fact.remembered", str(keyed.pk), "agent kiosk"),
        ("fact.forgotten", str(fact.pk), "agent pal"),
    ]
    assert (
        entries[0].details["scope"] == FactScope.PERSON
        and entries[0].details["user"] == trio.bob.pk
    )
    assert entries[1].details["api_key"] == keys["portal"].pk
    for entry in entries:
        assert "peanut" not in str(entry.details).lower() + entry.object_repr.lower()
        assert "pdf" not in str(entry.details).lower() + entry.object_repr.lower()


def test_remember_forget_and_their_audit_work_as_the_app_login(world, monkeypatch):
    """As a worker runs them: the app login, the run's tenant set (row-level security)."""
    trio, _, agents, _ = world
    pal = agents["pal"]
    monkeypatch.setattr(rls, "_app_role", settings.DB_APP_ROLE)
    with rls.tenant_scope(trio.acme.pk):
        fact = remember(pal, as_person(pal, trio.bob), "Likes green tea.")
        assert recall(pal, as_person(pal, trio.bob), "tea") == [fact.text]
        assert forget(pal, as_person(pal, trio.bob), fact) is True
    monkeypatch.setattr(rls, "_app_role", None)
    actions = AuditEntry.objects.filter(object_id=str(fact.pk)).values_list("action", flat=True)
    assert sorted(actions) == ["fact.forgotten", "fact.remembered"]


def test_the_beat_task_purges_every_tenants_expired_facts_as_the_app_login(world, monkeypatch):
    trio = world[0]
    past = timezone.now() - timedelta(minutes=1)
    Fact.objects.create(tenant=trio.acme, user=trio.bob, text="a", expires_at=past)
    Fact.objects.create(tenant=trio.globex, user=trio.charlie, text="b", expires_at=past)
    monkeypatch.setattr(rls, "_app_role", settings.DB_APP_ROLE)
    assert purge_expired_facts() == 2
    monkeypatch.setattr(rls, "_app_role", None)
    assert not Fact.objects.exists()
    assert AuditEntry.objects.filter(action="facts.expired").count() == 2


def test_a_shared_memorys_remember_tool_tells_the_model_it_is_shared(world):
    agents = world[2]

    def remember_description(agent) -> str:
        tools = {tool.name: tool for tool in memory_tools_for_agent(agent)}
        return tools["remember_fact"].description

    assert "shared" not in remember_description(agents["pal"])
    assert "shared with everyone who uses this agent" in remember_description(agents["desk"])
    assert "never remember anything private" in remember_description(agents["hub"])


def test_a_member_who_leaves_takes_their_facts_with_them(trio):
    """What agents remembered about a person goes when they leave the tenant (each fact
    audited, the system acting); others' facts and the agent's own stay."""
    desk = make_agent(trio.acme, "desk")
    kept_member = Fact.objects.create(tenant=trio.acme, user=trio.alice, text="alice's")
    kept_agent = Fact.objects.create(tenant=trio.acme, scope="agent", agent=desk, text="desk's")
    gone = [Fact.objects.create(tenant=trio.acme, user=trio.bob, text=f"bob {n}") for n in range(3)]

    tenancy.membership_remove(membership=trio.acme.memberships.get(user=trio.bob))

    assert not Fact.objects.filter(pk__in=[f.pk for f in gone]).exists()
    assert Fact.objects.filter(pk__in=[kept_member.pk, kept_agent.pk]).count() == 2
    entries = AuditEntry.objects.filter(tenant=trio.acme, action="fact.forgotten")
    assert sorted(int(e.object_id) for e in entries) == sorted(f.pk for f in gone)
    assert all(e.details.get("reason") == "member left" for e in entries)
    assert not any("bob 1" in str(e.details) for e in entries)  # never a fact's text
