"""The configuration compiler (agents/runtime/config/compiler.py): every rejection with its
exact path, the two contracts of a tool, and older versions migrated on load."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agents.runtime.config.compiler import ConfigInvalid, KnownNames, compile_config
from agents.runtime.config.loading import load_document
from tools.runtime.tool import Effect

FIND = {
    "name": "find_customer",
    "description": "Find a customer by e-mail.",
    "input_schema": {
        "type": "object",
        "properties": {"email": {"type": "string"}},
        "required": ["email"],
    },
    "output_schema": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "orders": {"type": "array", "items": {"$ref": "#/$defs/order"}},
        },
        "$defs": {"order": {"type": "object", "properties": {"ref": {"type": "string"}}}},
    },
    "config": {
        "method": "GET",
        "url": "https://crm.example.com/customers",
        "arguments": [{"argument": "email", "to": "query"}],
    },
}
NOTE = {
    "name": "create_note",
    "description": "Add a note to a customer.",
    "input_schema": {
        "type": "object",
        "properties": {"customer_id": {"type": "integer"}, "text": {"type": "string"}},
        "required": ["customer_id", "text"],
    },
    "config": {
        "method": "POST",
        "url": "https://crm.example.com/customers/{customer_id}/notes",
        "arguments": [{"argument": "customer_id", "to": "path"}],
        "context": [{"value": "user_id", "to": "body", "name": "author"}],
        "auth": {"type": "bearer"},
        "retry": {"max_attempts": 2},
    },
    "secret": "tool:create_note",
    "confirmation": {"required": True},
    "depends_on": {"customer_id": {"from": "find_customer", "path": "$.id"}},
}


NOTHING_KNOWN = KnownNames()


def document(**sections: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "version": 1,
        "connections": [{"name": "main", "kind": "offline", "default": True}],
        "tools": [copy.deepcopy(FIND), copy.deepcopy(NOTE)],
        "agents": [
            {
                "slug": "support",
                "name": "Support",
                "connection": "main",
                "tools": {"all": False, "names": ["find_customer", "create_note", "calculator"]},
            }
        ],
        "crews": [{"slug": "desk", "name": "Desk", "members": ["support"]}],
    }
    base.update(sections)
    return base


def problems(data: Any, known: KnownNames = NOTHING_KNOWN) -> list[tuple[str, str]]:
    with pytest.raises(ConfigInvalid) as caught:
        compile_config(data, known=known)
    return [(p.path, p.reason) for p in caught.value.problems]


def paths(data: Any, known: KnownNames = NOTHING_KNOWN) -> list[str]:
    return [path for path, _ in problems(data, known)]


def with_tool(index: int, **changes: Any) -> dict[str, Any]:
    data = document()
    data["tools"][index].update(changes)
    return data


# -- the contracts -------------------------------------------------------------------------
def test_the_model_contract_hides_runtime_filled_inputs_and_all_execution_data():
    compiled = compile_config(document())
    note = compiled.tools["create_note"]
    assert note.model.input_schema == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    shown = repr(note.model)
    for execution_detail in ("crm.example.com", "tool:create_note", "POST", "author", "bearer"):
        assert execution_detail not in shown
    # The document's own schema is unchanged: the execution side still maps customer_id.
    assert compiled.document.tools[1].input_schema["required"] == ["customer_id", "text"]


def test_the_execution_contract_holds_how_the_tool_is_called():
    execution = compile_config(document()).tools["create_note"].execution
    assert (execution.method, execution.url) == (
        "POST",
        "https://crm.example.com/customers/{customer_id}/notes",
    )
    assert execution.auth is not None
    assert (execution.auth.type, execution.auth.secret) == ("bearer", "tool:create_note")
    assert execution.arguments == ({"argument": "customer_id", "to": "path"},)
    assert execution.context == ({"value": "user_id", "to": "body", "name": "author"},)
    assert execution.dependencies["customer_id"].from_ == "find_customer"
    assert execution.retry is not None and execution.retry["max_attempts"] == 2
    assert (execution.effect, execution.idempotent) == (Effect.WRITE, False)
    assert execution.confirmation_required is True
    find = compile_config(document()).tools["find_customer"].execution
    assert (find.effect, find.idempotent, find.output_schema) == (
        Effect.READ,
        True,
        FIND["output_schema"],
    )


def test_a_builtin_alias_compiles_with_the_builtins_own_schema():
    data = document(
        tools=[{"name": "calculator", "kind": "builtin", "config": {"builtin": "calculator"}}],
        agents=[],
        crews=[],
    )
    tool = compile_config(data).tools["calculator"]
    assert tool.model.input_schema["properties"] == {"expression": {"type": "string"}}
    assert tool.model.description.startswith("Evaluate an arithmetic expression")
    assert (tool.execution.builtin, tool.execution.effect) == ("calculator", Effect.NONE)


# -- structure -----------------------------------------------------------------------------
def test_unknown_fields_are_refused_at_their_path_everywhere():
    data = document()
    data["extra"] = 1
    data["tools"][1]["confirmation"]["by"] = "admins"
    data["tools"][0]["config"]["verb"] = "GET"
    data["agents"][0]["tools"]["every"] = True
    data["connections"][0]["api_key"] = "sk-live-123"
    assert sorted(problems(data)) == [
        ("agents[0].tools.every", "unknown field"),
        ("connections[0].api_key", "unknown field"),
        ("extra", "unknown field"),
        ("tools[1].confirmation.by", "unknown field"),
    ]
    # A tool's config is checked once the document's structure is valid, at its own path.
    del data["extra"], data["tools"][1]["confirmation"]["by"]
    del data["agents"][0]["tools"]["every"], data["connections"][0]["api_key"]
    assert problems(data) == [("tools[0].config.verb", "unknown field")]


def test_the_config_of_an_http_tool_is_checked_with_its_own_paths():
    data = with_tool(0, config={"method": "FETCH", "url": "https://x.example", "verb": 1})
    found = paths(data)
    assert "tools[0].config.method" in found and "tools[0].config.verb" in found


def test_all_problems_are_reported_not_only_the_first():
    data = document()
    data["tools"][0]["config"]["url"] = "https://bob:pw@crm.example.com/customers"
    data["agents"][0]["connection"] = "nowhere"
    data["crews"][0]["members"] = ["ghost"]
    assert paths(data) == ["tools[0].config.url", "agents[0].connection", "crews[0].members[0]"]


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({}, "version", "give the document's version: version: 1"),
        ({"version": "1"}, "version", "must be a whole number; the current version is 1"),
        ({"version": 7}, "version", "version 7 is not supported; use one of 0, 1"),
    ],
)
def test_the_version_is_required_and_known(data, path, reason):
    assert problems(data) == [(path, reason)]


# -- credentials ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "https://bot:hunter2@crm.example.com/customers",
        "https://crm.example.com/customers?api_key=abc",
        "https://crm.example.com/customers?accessToken=abc",
        "https://crm.example.com/customers?x-auth-token=abc",
        "https://crm.example.com/customers?password=abc",
    ],
)
def test_credentials_in_a_tools_url_are_refused(url):
    data = document()
    data["tools"][0]["config"]["url"] = url
    [(path, reason)] = problems(data)
    assert path == "tools[0].config.url" and "secret" in reason


def test_credentials_in_fixed_values_headers_and_connection_urls_are_refused():
    data = document()
    data["tools"][0]["config"]["fixed"] = {
        "query": {"token": "abc", "page_size": 10},
        "headers": {"Authorization": "Bearer abc", "X-Client": "agents"},
    }
    data["connections"][0] = {
        "name": "main",
        "kind": "openai_compatible",
        "preset": "vllm",
        "base_url": "https://u:p@llm.example.com/v1",
        "extra_headers": {"X-Api-Key": "abc"},
    }
    assert sorted(paths(data)) == [
        "connections[0].base_url",
        "connections[0].extra_headers.X-Api-Key",
        "tools[0].config.fixed.headers.Authorization",
        "tools[0].config.fixed.query.token",
    ]


def test_auth_without_a_secret_is_refused():
    data = with_tool(1, secret=None)
    assert problems(data) == [("tools[1].secret", "bearer auth needs a secret: name it")]


def test_a_secret_without_auth_is_refused():
    data = with_tool(0, secret="tool:find_customer")
    assert problems(data) == [
        ("tools[0].secret", "a secret without config.auth is never sent: add auth, or remove it")
    ]


def test_a_long_dependency_chain_is_checked():
    chain = [
        {
            "name": f"t{i}",
            "description": "Step.",
            "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "output_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "config": {"url": "https://x.example.com/"},
            "depends_on": {"x": {"from": f"t{i + 1}", "path": "$.x"}} if i < 499 else {},
        }
        for i in range(500)
    ]
    assert len(compile_config({"version": 1, "tools": chain}).tools) == 500
    chain[-1]["depends_on"] = {"x": {"from": "t0", "path": "$.x"}}
    [(path, reason)] = problems({"version": 1, "tools": chain})
    assert path == "tools[499].depends_on.x" and reason.startswith("dependency cycle: t0 -> ")
    chain.append({**chain[0], "name": "t500"})
    assert problems({"version": 1, "tools": chain}) == [
        ("tools", "List should have at most 500 items after validation, not 501")
    ]


# -- dependencies --------------------------------------------------------------------------
def test_a_dependency_on_an_unknown_producer_is_refused():
    data = with_tool(1, depends_on={"customer_id": {"from": "lookup", "path": "$.id"}})
    assert problems(data) == [
        ("tools[1].depends_on.customer_id.from", "unknown producer tool 'lookup'")
    ]


def test_a_dependency_on_an_unknown_producer_field_is_refused():
    data = with_tool(1, depends_on={"customer_id": {"from": "find_customer", "path": "$.uid"}})
    assert problems(data) == [
        (
            "tools[1].depends_on.customer_id.path",
            "'find_customer''s output_schema has no field at $.uid",
        )
    ]


def test_a_dependency_path_follows_arrays_and_local_refs():
    data = document()
    data["tools"][1]["input_schema"]["properties"]["ref"] = {"type": "string"}
    data["tools"][1]["depends_on"]["ref"] = {"from": "find_customer", "path": "$.orders[0].ref"}
    assert "ref" not in compile_config(data).tools["create_note"].model.input_schema["properties"]
    data["tools"][1]["depends_on"]["ref"]["path"] = "$.orders[*].total"
    assert paths(data) == ["tools[1].depends_on.ref.path"]


def test_a_producer_without_an_output_schema_cannot_be_depended_on():
    data = document()
    del data["tools"][0]["output_schema"]
    assert paths(data) == ["tools[1].depends_on.customer_id.from"]


def test_a_type_mismatch_between_producer_and_consumer_is_refused():
    data = with_tool(1, depends_on={"customer_id": {"from": "find_customer", "path": "$.name"}})
    assert problems(data) == [
        (
            "tools[1].depends_on.customer_id",
            "type mismatch: 'find_customer' gives string at $.name, 'customer_id' takes integer",
        )
    ]


def test_an_integer_fits_a_number_input():
    data = document()
    data["tools"][1]["input_schema"]["properties"]["customer_id"] = {"type": "number"}
    compile_config(data)


def test_a_dependency_on_an_input_the_tool_does_not_have_is_refused():
    data = with_tool(1, depends_on={"order_id": {"from": "find_customer", "path": "$.id"}})
    assert problems(data) == [
        (
            "tools[1].depends_on.order_id",
            "'order_id' is not an input of 'create_note' (input_schema)",
        )
    ]


def test_dependency_cycles_are_refused_with_the_cycle_named():
    data = document()
    data["tools"][0]["input_schema"]["properties"]["email"] = {"type": "integer"}
    data["tools"][0]["output_schema"]["properties"]["id"] = {"type": "integer"}
    data["tools"][1]["output_schema"] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    data["tools"][0]["depends_on"] = {"email": {"from": "create_note", "path": "$.n"}}
    [(path, reason)] = problems(data)
    assert path in ("tools[0].depends_on.email", "tools[1].depends_on.customer_id")
    assert reason.startswith("dependency cycle: ")
    assert "find_customer" in reason and "create_note" in reason
    self_loop = document()
    self_loop["tools"][0]["output_schema"]["properties"]["email"] = {"type": "string"}
    self_loop["tools"][0]["depends_on"] = {"email": {"from": "find_customer", "path": "$.email"}}
    assert problems(self_loop) == [
        ("tools[0].depends_on.email", "dependency cycle: find_customer -> find_customer")
    ]


def test_a_malformed_dependency_path_is_refused():
    data = with_tool(1, depends_on={"customer_id": {"from": "find_customer", "path": "id"}})
    assert paths(data) == ["tools[1].depends_on.customer_id.path"]


# -- names and references ------------------------------------------------------------------
def test_duplicate_names_are_refused():
    data = document()
    data["tools"].append(copy.deepcopy(FIND))
    data["agents"].append({"slug": "support", "name": "Again"})
    data["crews"].append({"slug": "desk", "name": "Again"})
    data["connections"].append({"name": "main", "kind": "offline"})
    assert sorted(paths(data)) == [
        "agents[1].slug",
        "connections[1].name",
        "crews[1].slug",
        "tools[2].name",
    ]


def test_an_agent_naming_an_unknown_tool_or_connection_is_refused():
    data = document()
    data["agents"][0]["tools"]["names"].append("send_mail")
    data["agents"][0]["tools"]["exclude"] = ["drop_tables"]
    data["agents"][0]["connection"] = "backup"
    assert problems(data) == [
        ("agents[0].connection", "unknown connection 'backup'"),
        ("agents[0].tools.names[3]", "unknown tool 'send_mail'"),
        ("agents[0].tools.exclude[0]", "unknown tool 'drop_tables'"),
    ]


def test_names_the_tenant_keeps_outside_the_document_are_known():
    data = document()
    data["agents"][0]["tools"]["names"].append("crm__search")
    data["agents"][0]["connection"] = "backup"
    data["agents"][0]["approval"] = {"deciders": "group", "group": "leads"}
    data["crews"][0]["members"].append("sales")
    known = KnownNames(
        tools=frozenset({"crm__search"}),
        connections=frozenset({"backup"}),
        agents=frozenset({"sales"}),
        groups=frozenset({"leads"}),
    )
    compile_config(data, known=known)
    assert paths(data) == [
        "agents[0].connection",
        "agents[0].tools.names[3]",
        "agents[0].approval.group",
        "crews[0].members[1]",
    ]


def test_a_crew_naming_an_unknown_agent_is_refused():
    data = document(
        crews=[{"slug": "desk", "name": "Desk", "mode": "hierarchical", "members": ["support"]}]
    )
    assert problems(data) == [("crews[0].manager", "a hierarchical crew needs a manager agent")]
    data["crews"][0]["manager"] = "boss"
    data["crews"][0]["members"] = ["support", "support"]
    assert problems(data) == [
        ("crews[0].members[1]", "'support' is a member twice"),
        ("crews[0].manager", "unknown agent 'boss'"),
    ]


def test_reserved_and_builtin_names_are_refused_for_tenant_tools():
    data = with_tool(0, name="final_answer")
    data["tools"][1]["depends_on"] = {}
    data["agents"][0]["tools"]["names"] = []
    assert paths(data) == ["tools[0].name"]
    data["tools"][0]["name"] = "calculator"
    assert paths(data) == ["tools[0].name"]


def test_an_unknown_agent_kind_is_refused_when_kinds_are_known():
    data = document()
    data["agents"][0]["kind"] = "psychic"
    compile_config(data)  # kinds not given: the model's own check decides
    known = KnownNames(agent_kinds=frozenset({"orchestrator", "simple"}))
    assert problems(data, known) == [("agents[0].kind", "choose one of: orchestrator, simple")]


# -- schemas and patterns ------------------------------------------------------------------
def test_invalid_json_schemas_are_refused_at_their_path():
    data = document()
    data["tools"][0]["input_schema"] = {"type": "object", "properties": {"a": {"type": "text"}}}
    data["tools"][0]["config"]["arguments"] = []
    data["tools"][0]["output_schema"]["properties"]["id"] = {"$ref": "https://evil.example/s"}
    data["agents"][0]["output_schema"] = {"type": "array"}
    assert sorted(paths(data)) == [
        "agents[0].output_schema",
        "tools[0].input_schema",
        "tools[0].output_schema",
    ]


def test_patterns_the_regex_engine_cannot_bound_are_refused():
    data = document()
    data["tools"][0]["input_schema"]["properties"]["email"]["pattern"] = r"^(a+)\1$"
    [(path, reason)] = problems(data)
    assert path == "tools[0].input_schema" and "RE2" in reason


def test_a_mapping_of_an_argument_the_schema_lacks_is_refused():
    data = document()
    data["tools"][0]["config"]["arguments"] = [{"argument": "phone", "to": "query"}]
    assert problems(data) == [("tools[0].config", "mapped arguments not in input_schema: phone")]


# -- the tenant's policy -------------------------------------------------------------------
def test_a_write_tool_without_confirmation_is_refused_where_the_tenant_requires_one():
    data = document(policy={"require_confirmation_for_writes": True})
    compile_config(data)  # create_note writes and asks
    data["tools"][1]["confirmation"] = {"required": False}
    [(path, reason)] = problems(data)
    assert path == "tools[1].confirmation" and "requires confirmation" in reason
    data["tools"][1]["effect"] = "read"  # a stated effect counts, not only the method's
    compile_config(data)
    data["tools"][0]["effect"] = "destructive"
    assert paths(data) == ["tools[0].confirmation"]


def test_without_the_policy_a_write_tool_needs_no_confirmation():
    data = document()
    data["tools"][1]["confirmation"] = {"required": False}
    compile_config(data)


# -- versions ------------------------------------------------------------------------------
def test_a_version_0_document_migrates_on_load():
    data = document(version=0)
    for tool in data["tools"]:
        tool.pop("confirmation", None)
    data["tools"][1]["requires_approval"] = True
    compiled = compile_config(data)
    assert compiled.document.version == 1
    assert compiled.tools["create_note"].execution.confirmation_required is True
    assert compiled.tools["find_customer"].execution.confirmation_required is False


def test_a_version_1_document_does_not_accept_the_old_field():
    data = with_tool(1, requires_approval=True)
    assert problems(data) == [("tools[1].requires_approval", "unknown field")]


def test_a_builtin_alias_takes_no_inputs_from_other_tools():
    data = document()
    data["tools"].append(
        {
            "name": "calc",
            "kind": "builtin",
            "config": {"builtin": "calculator"},
            "depends_on": {"expression": {"from": "find_customer", "path": "$.name"}},
        }
    )
    assert problems(data) == [("tools[2].depends_on", "only HTTP tools take inputs from tools")]


def test_the_example_in_the_docs_compiles():
    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration-as-code.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    compiled = compile_config(load_document(example))
    note = compiled.tools["create_note"]
    assert "customer_id" not in note.model.input_schema["properties"]
    assert compiled.tools["find_customer"].execution.auth.secret == "tool:find_customer"


@pytest.mark.parametrize("url", ["https://[::1/v1", "https://[redacted]@x.example.com", "ftp://x"])
def test_a_url_that_is_not_one_is_refused_not_crashed_on(url):
    data = document()
    data["connections"][0]["base_url"] = url
    data["agents"][0]["remote_url"] = url
    assert problems(data) == [
        ("connections[0].base_url", "give an http:// or https:// URL with a host"),
        ("agents[0].remote_url", "give an http:// or https:// URL with a host"),
    ]
