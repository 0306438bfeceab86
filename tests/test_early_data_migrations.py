"""Data migrations early in the graph, run from the state before them with rows in it
(docs/operations.md, "Upgrading"): tenancy 0003 and 0014, agents 0024 and 0027.

Migrating the session's database back to before them costs 10-13 s a stage (Django renders
the project's states for every migration it unapplies), and cannot reach tenancy 0003's in a
test's transaction at all (agents 0014 builds an index CONCURRENTLY, which no transaction
may hold). So this test migrates a database of its own *forward* from empty, a stage at a
time, with `manage.py migrate`'s executor (agentplatform/management/migration_executor.py):
to just before a migration (only what that state depends on runs), writes rows with that
state's models, migrates past it and reads what it made. The stages follow the dependency
graph: tenancy 0003 comes before everything else runs, and agents 0022 already needs
tenancy 0014. About 3.5 s in all (2 s of CPU; 7 with Django's own executor): an integration
test.

The database is the `default` alias while the test runs, since the migrations' RunPython
functions query through it. Rows are written as the database owner, as migrations run: the
tenant policies (tenancy 0005 on) bind the app role only. Each write commits, as an
installation's rows had: a migration's own writes then meet PostgreSQL as they do there (a
test transaction around them would hide its deferred foreign-key checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.db import connections

from agentplatform.management.migration_executor import MigrationExecutor

pytestmark = pytest.mark.integration

Migrate = Callable[[tuple[str, str]], object]  # a target -> the apps of its state
Ids = dict[str, int]  # by slug or username
Chats = dict[str, tuple[int, list[int], list[int]]]  # by tenant: conversation, runs, messages


@pytest.fixture
def migrate(django_db_blocker) -> Iterator[Migrate]:
    """Migrates an empty database of this test's forward to a target, each call; gives the
    apps (historical models) of that state. The database is dropped afterwards."""
    session = connections["default"]
    quote = session.ops.quote_name
    name = session.creation._get_test_db_name() + "_early"
    options = {k: v for k, v in session.settings_dict["OPTIONS"].items() if k != "pool"}
    own = type(session)({**session.settings_dict, "NAME": name, "OPTIONS": options}, "default")

    def to(target: tuple[str, str]):
        executor = MigrationExecutor(own)
        executor.migrate([target])
        executor.loader.build_graph()
        return executor.loader.project_state([target]).apps

    with django_db_blocker.unblock():
        with session._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)")
            cursor.execute(f"CREATE DATABASE {quote(name)} TEMPLATE template0")
        connections["default"] = own
        try:
            yield to
        finally:
            connections["default"] = session
            own.close()
            with session._nodb_cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)")


def test_early_data_migrations_fill_what_they_add_for_rows_written_before(migrate):
    tenants, people = keys_take_their_creators_role(migrate)
    keys_made_by_keys_name_their_maker(migrate, tenants, people)
    chats = conversations_become_threads(migrate, tenants)
    answers_carry_their_runs_steers(migrate, tenants, chats)


def keys_take_their_creators_role(migrate: Migrate) -> tuple[Ids, Ids]:
    """tenancy 0003: a key made before roles acts with its creator's role in the key's
    tenant (a member's key must not keep an owner's authority); with no creator, admin; its
    creator no member there, viewer."""
    before = migrate(("tenancy", "0002_invitations"))
    Tenant, User = before.get_model("tenancy", "Tenant"), before.get_model("auth", "User")
    Membership = before.get_model("tenancy", "Membership")
    ApiKey = before.get_model("tenancy", "ApiKey")
    acme = Tenant.objects.create(name="Acme", slug="acme")
    globex = Tenant.objects.create(name="Globex", slug="globex")
    alice, bob, charlie = (User.objects.create(username=n) for n in ("alice", "bob", "charlie"))
    memberships = ((acme, alice, "owner"), (acme, bob, "member"), (globex, charlie, "owner"))
    for tenant, user, role in memberships:
        Membership.objects.create(tenant=tenant, user=user, role=role)
    creators = {"bob's": bob, "alice's": alice, "nobody's": None, "charlie's": charlie}
    for name, creator in creators.items():
        ApiKey.objects.create(tenant=acme, name=name, prefix=name, secret_hash="h",
                              scopes=["admin"], created_by=creator)  # fmt: skip

    after = migrate(("tenancy", "0003_policy_keys_groups"))
    roles = dict(after.get_model("tenancy", "ApiKey").objects.values_list("name", "role"))
    assert roles == {"bob's": "member", "alice's": "owner", "nobody's": "admin",
                     "charlie's": "viewer"}  # fmt: skip
    return {"acme": acme.pk, "globex": globex.pk}, {"alice": alice.pk}


def keys_made_by_keys_name_their_maker(migrate: Migrate, tenants: Ids, people: Ids) -> None:
    """tenancy 0014: a key another key made names that key, and the person behind it, as the
    audit log recorded them, down a chain of keys too; a key the log names no maker of stays
    without one."""
    before = migrate(("tenancy", "0013_policies_bind_the_app_login"))
    ApiKey, AuditEntry = (before.get_model("tenancy", m) for m in ("ApiKey", "AuditEntry"))
    made = {
        name: ApiKey.objects.create(
            tenant_id=tenants["acme"], name=name, prefix=name, secret_hash="h", scopes=["read"]
        ).pk
        for name in ("made", "made by made", "alone")
    }  # fmt: skip
    alices = ApiKey.objects.get(name="alice's").pk
    for key, maker in ((made["made"], alices), (made["made by made"], made["made"])):
        AuditEntry.objects.create(
            tenant_id=tenants["acme"], action="api_key.created", object_type="tenancy.apikey",
            object_id=str(key), api_key_id=maker,
        )  # fmt: skip

    after = migrate(("tenancy", "0014_apikey_created_by_key"))
    keys = after.get_model("tenancy", "ApiKey").objects.filter(pk__in=made.values())
    makers = {key.name: (key.created_by_key_id, key.created_by_id) for key in keys}
    alice = people["alice"]
    assert makers == {"made": (alices, alice), "made by made": (made["made"], alice),
                      "alone": (None, None)}  # fmt: skip


def conversations_become_threads(migrate: Migrate, tenants: Ids) -> Chats:
    """agents 0024: a conversation's messages become one thread in the order written, its
    last message its leaf; a run answers its first user message."""
    before = migrate(("agents", "0023_attachments"))
    Agent, Run = before.get_model("agents", "Agent"), before.get_model("agents", "Run")
    Conversation, Message = (before.get_model("agents", m) for m in ("Conversation", "Message"))
    agents = {
        slug: Agent.objects.create(tenant_id=tenant, slug="helper", name="Helper")
        for slug, tenant in tenants.items()
    }
    chats = {}
    for slug, tenant in tenants.items():
        agent = agents[slug]
        chat = Conversation.objects.create(tenant_id=tenant, agent=agent, title=slug)
        runs = [Run.objects.create(tenant_id=tenant, agent=agent, conversation=chat) for _ in "ab"]
        turns = [(run, role) for run in runs for role in ("user", "assistant")]
        said = [
            Message.objects.create(tenant_id=tenant, conversation=chat, run=run, role=role,
                                   content=f"{slug} {n}").pk
            for n, (run, role) in enumerate(turns)
        ]  # fmt: skip
        chats[slug] = (chat.pk, [run.pk for run in runs], said)
    empty = Conversation.objects.create(tenant_id=tenants["acme"], agent=agents["acme"]).pk
    unasked = Run.objects.create(tenant_id=tenants["acme"], agent=agents["acme"]).pk

    after = migrate(("agents", "0024_conversation_branches"))
    Conversation, Message, Run = (
        after.get_model("agents", m) for m in ("Conversation", "Message", "Run")
    )
    for chat, runs, said in chats.values():
        assert Conversation.objects.get(pk=chat).leaf_id == said[-1]
        parents = dict(Message.objects.filter(conversation_id=chat).values_list("pk", "parent_id"))
        assert parents == {said[0]: None, said[1]: said[0], said[2]: said[1], said[3]: said[2]}
        assert [Run.objects.get(pk=run).in_reply_to_id for run in runs] == [said[0], said[2]]
    assert Conversation.objects.get(pk=empty).leaf_id is None
    assert Run.objects.get(pk=unasked).in_reply_to_id is None
    return chats


def answers_carry_their_runs_steers(migrate: Migrate, tenants: Ids, chats: Chats) -> None:
    """agents 0027: an answer carries the steering messages its run applied, in order; not
    the ones it refused, nor another run's."""
    before = migrate(("agents", "0026_conversation_compaction"))
    QueuedMessage = before.get_model("agents", "QueuedMessage")
    chat, (steered, _), said = chats["acme"]
    queued = (("shorter", "applied"), ("in French", "refused"), ("no lists", "applied"))
    for content, status in queued:
        QueuedMessage.objects.create(
            tenant_id=tenants["acme"], conversation_id=chat, run_id=steered, kind="steer",
            status=status, content=content,
        )  # fmt: skip

    after = migrate(("agents", "0027_answer_steers"))
    steers = dict(after.get_model("agents", "Message").objects.values_list("pk", "steers"))
    assert [steers[pk] for pk in said] == [[], ["shorter", "no lists"], [], []]
    assert [steers[pk] for pk in chats["globex"][2]] == [[], [], [], []]
