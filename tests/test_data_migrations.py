"""Data migrations, run from the state before them with rows in it (docs/operations.md,
"Upgrading"): the test migrates the session's database back to just before the migration,
writes rows with the models of that state, migrates forward (with `manage.py migrate`'s
executor: agentplatform/management/migration_executor.py) and reads what it made. It all
happens in the test's transaction (PostgreSQL's DDL is transactional), so the rollback at
its end leaves the database migrated as before."""

from __future__ import annotations

import pytest
from django.db import connection

from agentplatform.management.migration_executor import MigrationExecutor
from tenancy.models import Tenant as CurrentTenant

# Integration tier although it starts no process: migrating the schema back and forth costs
# seconds each (and the test template is remade when the migrations change): not `-m fast`.
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


def test_oauth_tokens_stored_before_get_their_clients_resource_if_its_issuer_is_theirs():
    """tools 0010: a token gets the resource of its connection's client when that client is
    its issuer's; a token of another issuer keeps none (unusable: asked again)."""
    before = migrate(("tools", "0009_mcp_oauth"))
    Tenant = before.get_model("tenancy", "Tenant")
    Connection = before.get_model("tools", "McpServerConnection")
    Client = before.get_model("tools", "McpOAuthClient")
    Token = before.get_model("tools", "McpOAuthToken")
    tenant = Tenant.objects.create(name="Old", slug="old")
    tokens = {}
    for name, token_issuer in (("crm", "https://crm.example"), ("wiki", "https://elsewhere")):
        connection = Connection.objects.create(
            tenant=tenant, name=name, url=f"https://{name}.example/mcp", tool_prefix=name,
            auth_mode="oauth_tenant",
        )  # fmt: skip
        Client.objects.create(
            tenant=tenant, connection=connection, issuer=f"https://{name}.example",
            authorization_endpoint=f"https://{name}.example/authorize",
            token_endpoint=f"https://{name}.example/token",
            resource=f"https://{name}.example/mcp", redirect_uri="https://us.example/callback",
            source="registered", client_id=f"client-{name}",
        )  # fmt: skip
        tokens[name] = Token.objects.create(
            tenant=tenant, connection=connection, issuer=token_issuer, access_token="secret"
        ).pk

    after = migrate(("tools", "0010_oauth_token_resource"))
    Token = after.get_model("tools", "McpOAuthToken")
    found = {name: Token.objects.get(pk=pk).resource for name, pk in tokens.items()}
    assert found == {"crm": "https://crm.example/mcp", "wiki": ""}


def test_mcp_connections_with_a_stored_header_keep_authorising_with_it():
    """tools 0009: a connection that had an auth header is in mode "header" (else its calls
    would go without it); one without stays "none"."""
    before = migrate(("tools", "0008_mcp_tool_examples"))
    Connection = before.get_model("tools", "McpServerConnection")
    # Only tools went back: the tenant as it is now (that state's Tenant is older).
    tenant = CurrentTenant.objects.create(name="Old", slug="old")
    made = {
        name: Connection.objects.create(
            tenant_id=tenant.pk, name=name, url=f"https://{name}.example/mcp", tool_prefix=name,
            auth_header=header,
        ).pk
        for name, header in (("crm", "Bearer old-token"), ("wiki", None))
    }  # fmt: skip

    after = migrate(("tools", "0009_mcp_oauth"))
    Connection = after.get_model("tools", "McpServerConnection")
    modes = {name: Connection.objects.get(pk=pk).auth_mode for name, pk in made.items()}
    assert modes == {"crm": "header", "wiki": "none"}
    assert Connection.objects.get(pk=made["crm"]).auth_header == "Bearer old-token"
