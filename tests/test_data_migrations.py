"""Data migrations, run from the state before them with rows in it (docs/operations.md,
"Upgrading"): the test migrates the session's database back to just before the migration,
writes rows with the models of that state, migrates forward and reads what it made. It all
happens in the test's transaction (PostgreSQL's DDL is transactional), so the rollback at
its end leaves the database migrated as before."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

# Integration tier although it starts no process: migrating the schema back and forth costs
# tens of seconds (tenancy 0014 takes agents 0022-0035 back with it), too much for `-m fast`.
pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def migrate(target: tuple[str, str]):
    """Migrate to `target` (back or forward); the apps (historical models) of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    # Rows written before a schema change: fire their deferred FK checks now, or PostgreSQL
    # refuses the ALTER TABLE ("pending trigger events").
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor.loader.build_graph()
    return executor.loader.project_state([target]).apps


def test_governed_memory_makes_existing_facts_their_persons_with_their_agent():
    """agents 0035: every fact so far becomes person scope, naming its run's agent."""
    before = migrate(("agents", "0034_workflow_definitions"))
    Tenant, User = before.get_model("tenancy", "Tenant"), before.get_model("auth", "User")
    Agent, Run = before.get_model("agents", "Agent"), before.get_model("agents", "Run")
    Fact = before.get_model("agents", "Fact")
    tenant = Tenant.objects.create(name="Old", slug="old")
    ann = User.objects.create(username="ann")
    agent = Agent.objects.create(tenant=tenant, slug="helper", name="Helper")
    run = Run.objects.create(tenant=tenant, agent=agent)
    from_run = Fact.objects.create(tenant=tenant, user=ann, text="likes tea", source_run=run)
    by_hand = Fact.objects.create(tenant=tenant, user=ann, text="lives in Oslo")

    after = migrate(("agents", "0035_governed_memory"))
    Fact = after.get_model("agents", "Fact")
    made = {f.pk: (f.scope, f.user_id, f.agent_id) for f in Fact.objects.all()}
    assert made == {from_run.pk: ("person", ann.pk, agent.pk), by_hand.pk: ("person", ann.pk, None)}


def test_keys_made_by_keys_get_their_maker_from_the_audit_log():
    """tenancy 0014: a key whose `api_key.created` entry names a key as its actor gets that
    key as its maker, and the maker's person; a key with no such entry stays as it was."""
    before = migrate(("tenancy", "0013_policies_bind_the_app_login"))
    Tenant, User = before.get_model("tenancy", "Tenant"), before.get_model("auth", "User")
    ApiKey, AuditEntry = (
        before.get_model("tenancy", "ApiKey"),
        before.get_model("tenancy", "AuditEntry"),
    )
    tenant = Tenant.objects.create(name="Old", slug="old")
    bob = User.objects.create(username="bob")

    def key(name: str, **fields):
        return ApiKey.objects.create(
            tenant=tenant, name=name, prefix=name[:8], secret_hash=f"hash-{name}", **fields
        )

    maker = key("maker", created_by=bob)
    made = key("made")
    key("lone")
    AuditEntry.objects.create(
        tenant=tenant, action="api_key.created", api_key=maker,
        object_type="tenancy.apikey", object_id=str(made.pk),
    )  # fmt: skip

    after = migrate(("tenancy", "0014_apikey_created_by_key"))
    ApiKey = after.get_model("tenancy", "ApiKey")
    found = {k.name: (k.created_by_key_id, k.created_by_id) for k in ApiKey.objects.all()}
    assert found == {"maker": (None, bob.pk), "made": (maker.pk, bob.pk), "lone": (None, None)}
