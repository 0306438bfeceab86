"""Tool definition services: validated saves, conflicts, tenant checks, registry refresh."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404

from agents.models import Agent
from base.versions import config_bump
from tenancy.records.saving import SaveConflict
from tests.api.test_resources import as_key, assert_error
from tests.factories import login
from tools.loader import registry_for_tenant
from tools.models import ToolDefinition
from tools.services import tool_definition_delete, tool_definition_save

pytestmark = pytest.mark.django_db

CALC = {"name": "calc", "kind": "builtin", "config": {"builtin": "calculator"}}


def test_save_creates_for_the_tenant_updates_and_refreshes_the_registry(trio):
    definition = tool_definition_save(
        tenant=trio.acme, changes={**CALC, "description": "Company calculator"}
    )
    assert definition.tenant_id == trio.acme.pk and definition.version == 1
    assert registry_for_tenant(trio.acme).get("calc").description == "Company calculator"
    tool_definition_save(
        tenant=trio.acme, definition=definition, changes={"description": "Renamed"}
    )
    definition.refresh_from_db()
    assert definition.description == "Renamed" and definition.version == 2
    assert registry_for_tenant(trio.acme).get("calc").description == "Renamed"
    assert not registry_for_tenant(trio.globex).has("calc")


def test_invalid_data_is_a_validation_error_and_nothing_is_written(trio):
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(tenant=trio.acme, changes={**CALC, "timeout_s": 0})
    assert "timeout_s" in caught.value.message_dict
    assert not ToolDefinition.objects.exists()
    definition = tool_definition_save(tenant=trio.acme, changes=CALC)
    with pytest.raises(ValidationError):
        tool_definition_save(tenant=trio.acme, definition=definition, changes={"timeout_s": -1})
    definition.refresh_from_db()
    assert definition.timeout_s == 30.0 and definition.version == 1


@pytest.mark.parametrize("name", ["import", "try"])
def test_a_word_of_the_tools_rest_paths_is_no_tool_name(trio, name):
    # /api/v1/tools/import and /tools/try are routes: a tool so named could not be reached.
    with pytest.raises(ValidationError, match="REST paths"):
        tool_definition_save(tenant=trio.acme, changes={**CALC, "name": name})
    assert not ToolDefinition.objects.exists()


def test_a_rate_limit_reaches_the_registrys_tool_and_a_bad_one_is_refused(trio):
    definition = tool_definition_save(
        tenant=trio.acme, changes={**CALC, "rate_limit_per_minute": 9}
    )
    assert registry_for_tenant(trio.acme).get("calc").capability.rate_limit_per_minute == 9
    assert registry_for_tenant(trio.acme).get("calculator").capability.rate_limit_per_minute is None
    for bad in (0, -1, 100_001):
        with pytest.raises(ValidationError) as caught:
            tool_definition_save(
                tenant=trio.acme, definition=definition, changes={"rate_limit_per_minute": bad}
            )
        assert "rate_limit_per_minute" in caught.value.message_dict
    definition.refresh_from_db()
    assert definition.rate_limit_per_minute == 9


def test_a_duplicate_name_raced_past_validation_is_a_conflict(trio, monkeypatch):
    tool_definition_save(tenant=trio.acme, changes=CALC)
    with pytest.raises(ValidationError):  # a duplicate full_clean sees: 400, as before
        tool_definition_save(tenant=trio.acme, changes=CALC)
    monkeypatch.setattr(
        ToolDefinition, "validate_constraints", lambda self, exclude=None: None
    )  # the other row arrives after validation
    with pytest.raises(SaveConflict, match="retry"):
        tool_definition_save(tenant=trio.acme, changes=CALC)
    assert ToolDefinition.objects.count() == 1


def test_another_tenants_definition_is_not_found_and_unchanged(trio):
    theirs = tool_definition_save(tenant=trio.globex, changes=CALC)
    with pytest.raises(Http404):
        tool_definition_save(tenant=trio.acme, definition=theirs, changes={"enabled": False})
    with pytest.raises(Http404):
        tool_definition_delete(tenant=trio.acme, definition=theirs)
    theirs.refresh_from_db()
    assert theirs.enabled and theirs.version == 1


def test_delete_brings_back_the_builtin(trio):
    hide = tool_definition_save(
        tenant=trio.acme,
        changes={"name": "think", "kind": "builtin", "config": {"builtin": "think"}},
    )
    tool_definition_save(tenant=trio.acme, definition=hide, changes={"enabled": False})
    assert not registry_for_tenant(trio.acme).has("think")
    tool_definition_delete(tenant=trio.acme, definition=hide)
    assert not ToolDefinition.objects.exists()
    assert registry_for_tenant(trio.acme).has("think")


# -- tenant-written schemas: nothing outside the schema, patterns RE2 can run --------------
def http_tool(url: str, schema: dict) -> dict:
    return {
        "name": "lookup",
        "kind": "http",
        "description": "Look a thing up.",
        "input_schema": schema,
        "config": {"method": "GET", "url": url},
    }


def test_a_schema_reading_a_file_or_a_url_is_refused_at_save(trio, local_server, tmp_path):
    secrets = tmp_path / "local-secrets.json"
    secrets.write_text('{"SECRET_KEY": "file-SECRET-123"}')
    refs = [f"file://{secrets}#/nope", f"{local_server.url}/schema.json"]
    for ref in refs:
        schema = {"type": "object", "properties": {"q": {"$ref": ref}}}
        with pytest.raises(ValidationError) as caught:
            tool_definition_save(tenant=trio.acme, changes=http_tool(local_server.url, schema))
        assert "is not allowed" in caught.value.message_dict["input_schema"][0]
        calc = {**CALC, "output_schema": schema}
        with pytest.raises(ValidationError) as caught:
            tool_definition_save(tenant=trio.acme, changes=calc)
        assert "is not allowed" in caught.value.message_dict["output_schema"][0]
        agent = Agent(tenant=trio.acme, slug="a", name="A", output_schema=schema)
        with pytest.raises(ValidationError) as caught:
            agent.full_clean()
        assert "is not allowed" in caught.value.message_dict["output_schema"][0]
    assert not ToolDefinition.objects.exists()
    assert local_server.requests == []


def test_a_pattern_re2_cannot_run_is_refused_at_save(trio, local_server):
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": r"(a)\1"}}}
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(tenant=trio.acme, changes=http_tool(local_server.url, schema))
    message = caught.value.message_dict["input_schema"][0]
    assert "at properties/q: pattern '(a)\\\\1' is not supported" in message
    assert not ToolDefinition.objects.exists()


def test_a_schema_changed_in_the_database_reads_nothing(trio, local_server, tmp_path, caplog):
    """A row written past validation (QuerySet.update): the registry skips the tool with a
    warning; no file or server is read."""
    secrets = tmp_path / "local-secrets.json"
    secrets.write_text('{"SECRET_KEY": "file-SECRET-123"}')
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    definition = tool_definition_save(tenant=trio.acme, changes=http_tool(local_server.url, schema))
    assert registry_for_tenant(trio.acme).has("lookup")
    for ref in [f"file://{secrets}#/nope", f"{local_server.url}/schema.json"]:
        planted = {"type": "object", "properties": {"q": {"$ref": ref}}}
        ToolDefinition.objects.filter(pk=definition.pk).update(input_schema=planted)
        config_bump(trio.acme.pk)  # update() sends no signal
        assert not registry_for_tenant(trio.acme).has("lookup")
    assert "lookup of tenant" in caplog.text and "file-SECRET-123" not in caplog.text
    assert local_server.requests == []


def test_the_tenants_policy_refuses_a_write_tool_without_confirmation(trio):
    post = {
        "name": "post_note",
        "kind": "http",
        "description": "Post a note.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "config": {"method": "POST", "url": "https://x.example.com/notes"},
    }
    trio.acme.require_confirmation_for_writes = True
    trio.acme.save()
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(tenant=trio.acme, changes=post)
    assert "requires confirmation" in caught.value.message_dict["requires_approval"][0]
    tool_definition_save(tenant=trio.acme, changes={**post, "requires_approval": True})
    tool_definition_save(tenant=trio.acme, changes={**CALC})  # a pure built-in: no rule
    tool_definition_save(tenant=trio.globex, changes=post)  # another tenant's policy


def test_a_dependency_must_name_an_input_of_the_tool_and_be_well_formed(trio):
    tool = {
        "name": "create_note",
        "kind": "http",
        "description": "Add a note.",
        "input_schema": {"type": "object", "properties": {"customer_id": {"type": "integer"}}},
        "config": {"method": "POST", "url": "https://x.example.com/notes"},
    }
    good = {"customer_id": {"from": "find_customer", "path": "$.id"}}
    tool_definition_save(tenant=trio.acme, changes=FIND)
    tool_definition_save(tenant=trio.acme, changes={**tool, "depends_on": good})
    for bad, reason in (
        ({"order_id": {"from": "find_customer", "path": "$.id"}}, "not an input"),
        ({"customer_id": {"from": "find_customer", "path": "id"}}, "pattern"),
        ({"customer_id": {"from": "find_customer"}}, "Field required"),
        (["customer_id"], "valid dictionary"),
    ):
        with pytest.raises(ValidationError) as caught:
            tool_definition_save(
                tenant=trio.acme, changes={**tool, "name": "other", "depends_on": bad}
            )
        assert reason in caught.value.message_dict["depends_on"][0]


FIND = {
    "name": "find_customer",
    "kind": "http",
    "description": "Find a customer.",
    "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}},
    "output_schema": {"type": "object", "properties": {"id": {"type": "integer"}}},
    "config": {"url": "https://crm.example.com/customers"},
}
NOTE = {
    "name": "create_note",
    "kind": "http",
    "description": "Add a note.",
    "input_schema": {"type": "object", "properties": {"customer_id": {"type": "integer"}}},
    "config": {"method": "POST", "url": "https://crm.example.com/notes"},
    "depends_on": {"customer_id": {"from": "find_customer", "path": "$.id"}},
}


def test_every_save_checks_the_dependency_graph_as_the_compiler_does(trio):
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(tenant=trio.acme, changes=NOTE)  # its producer does not exist
    assert caught.value.message_dict["depends_on"] == [
        "customer_id.from: unknown producer tool 'find_customer'"
    ]
    find = tool_definition_save(tenant=trio.acme, changes=FIND)
    tool_definition_save(tenant=trio.acme, changes=NOTE)
    # A change of the producer that would break its consumer is refused, naming it.
    for change in (
        {"output_schema": {"type": "object", "properties": {"uid": {"type": "integer"}}}},
        {"output_schema": {"type": "object", "properties": {"id": {"type": "string"}}}},
        {"name": "lookup_customer"},
    ):
        with pytest.raises(ValidationError) as caught:
            tool_definition_save(tenant=trio.acme, definition=find, changes=change)
        [message] = caught.value.message_dict["__all__"]
        assert message.startswith("tool 'create_note' (depends_on.customer_id")
        find.refresh_from_db()
    assert find.name == "find_customer"
    tool_definition_save(tenant=trio.acme, definition=find, changes={"description": "Find."})
    # A cycle through the consumer is refused too.
    cyclic = {"customer_id": {"from": "find_customer", "path": "$.id"}}
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(
            tenant=trio.acme,
            definition=find,
            changes={
                "input_schema": {
                    "type": "object",
                    "properties": {"customer_id": {"type": "integer"}},
                },
                "depends_on": cyclic,
            },
        )
    assert "dependency cycle" in str(caught.value.message_dict)


def test_a_producer_other_tools_depend_on_cannot_be_deleted(trio, client):
    find = tool_definition_save(tenant=trio.acme, changes=FIND)
    note = tool_definition_save(tenant=trio.acme, changes=NOTE)
    with pytest.raises(ValidationError, match="create_note takes inputs from this tool"):
        tool_definition_delete(tenant=trio.acme, definition=find)
    # The REST resource and the page say so too, and keep it.
    assert_error(as_key(client, trio.acme).delete("/tools/find_customer"), 400)
    login(client, trio.alice)
    page = client.post(f"/t/acme/tools/{find.pk}/delete/", follow=True)
    assert "create_note takes inputs from this tool" in page.content.decode()
    assert ToolDefinition.objects.filter(pk=find.pk).exists()
    tool_definition_delete(tenant=trio.acme, definition=note)
    tool_definition_delete(tenant=trio.acme, definition=find)
