"""A tenant's configuration as one document (agents/config_document.py): export, plan
(compile and diff), apply, on the real database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.config_document import config_export, config_import, config_plan
from agents.models import Agent, Crew
from agents.runtime.config.loading import dump_document
from agents.seed import seed_demo_agent
from providers.models import ProviderConnection
from providers.services import seed_demo_connection
from tenancy.services import group_create
from tests.factories import make_agent, make_connection, make_crew, make_http_tool, make_tool
from tools.models import ToolDefinition

PLANTED = "sk-PLANTED-never-exported-4242"
FIND_OUTPUT = {"type": "object", "properties": {"id": {"type": "integer"}}}


@pytest.fixture
def configured(trio):
    """acme with one object of each kind, linked as a document links them."""
    acme = trio.acme
    main = make_connection(acme, "main", is_default=True, default_model="offline-demo")
    make_http_tool(
        acme,
        "find_customer",
        "https://crm.example.com/customers",
        output_schema=FIND_OUTPUT,
        tags=["crm"],
    )
    make_http_tool(
        acme,
        "create_note",
        "https://crm.example.com/customers/{customer_id}/notes",
        method="POST",
        input_schema={
            "type": "object",
            "properties": {"customer_id": {"type": "integer"}, "text": {"type": "string"}},
            "required": ["customer_id", "text"],
        },
        config={"arguments": [{"argument": "customer_id", "to": "path"}]},
        requires_approval=True,
        depends_on={"customer_id": {"from": "find_customer", "path": "$.id"}},
    )
    make_tool(acme, "calc", description="Arithmetic.")
    support = make_agent(
        acme,
        "support",
        instructions="Help customers.",
        provider_connection=main,
        use_all_tools=False,
        tool_names=["find_customer", "create_note", "calc"],
        output_schema={"type": "object", "properties": {"answer": {"type": "string"}}},
    )
    boss = make_agent(acme, "boss", approval_policy="writes", results_without_tools=True)
    make_crew(acme, "desk", members=[support, boss], mode="hierarchical", manager=boss)
    return trio


def as_yaml(data: dict[str, Any]) -> str:
    return dump_document(data, "yaml")


def changes_of(plan) -> list[tuple[str, str, str]]:
    return [(c.section, c.name, c.action) for c in plan.changes]


def test_an_export_holds_every_object_with_its_links(configured):
    data = config_export(tenant=configured.acme)
    assert data["version"] == 1
    assert [c["name"] for c in data["connections"]] == ["main"]
    assert [t["name"] for t in data["tools"]] == ["calc", "create_note", "find_customer"]
    note = next(t for t in data["tools"] if t["name"] == "create_note")
    assert note["confirmation"] == {"required": True}
    assert note["depends_on"] == {"customer_id": {"from": "find_customer", "path": "$.id"}}
    support = next(a for a in data["agents"] if a["slug"] == "support")
    assert support["connection"] == "main"
    assert support["tools"]["names"] == ["find_customer", "create_note", "calc"]
    assert data["crews"] == [
        {
            "slug": "desk",
            "name": "Desk",
            "description": "",
            "mode": "hierarchical",
            "members": ["support", "boss"],
            "manager": "boss",
            "max_delegations": 10,
            "max_depth": 3,
            "token_budget": None,
            "compaction": {"threshold": None, "connection": None, "model": ""},
            "active": True,
            "publish": {"evaluation": None, "threshold": 1.0},
        }
    ]


def test_secrets_are_exported_by_name_and_never_by_value(configured):
    acme = configured.acme
    make_connection(acme, "claude", kind="anthropic", api_key=PLANTED)
    make_http_tool(
        acme, "billing", "https://billing.example.com/x", config={"auth": {"type": "bearer"}},
        secret=PLANTED,
    )  # fmt: skip
    make_agent(acme, "far", kind="remote", remote_url="https://agents.example.com/a",
               remote_token=PLANTED)  # fmt: skip
    data = config_export(tenant=acme)
    for text in (as_yaml(data), dump_document(data, "json"), repr(data)):
        assert PLANTED not in text
        assert "PLANTED" not in text
    secrets = {
        entry.get("secret")
        for section in ("connections", "tools", "agents")
        for entry in data[section]
    }
    assert {"connection:claude", "tool:billing", "agent:far"} <= secrets


def test_credentials_in_rows_stored_before_they_were_refused_are_not_exported(configured):
    acme = configured.acme
    # Written around validation, as rows stored before the rule may be.
    ProviderConnection.objects.create(
        tenant=acme, name="gw", kind="openai_compatible", preset="vllm",
        base_url=f"https://bot:{PLANTED}@llm.example.com/v1",
        extra_headers={"X-Team": "a", "X-Auth-Token": PLANTED},
    )  # fmt: skip
    make_http_tool(
        acme, "legacy", f"https://x.example.com/a?api_key={PLANTED}&page=2",
        config={"fixed": {"headers": {"Authorization": PLANTED}, "query": {"sig": PLANTED}}},
    )  # fmt: skip
    make_agent(acme, "far", kind="remote", remote_url=f"https://a.example.com/?token={PLANTED}")
    data = config_export(tenant=acme)
    assert PLANTED not in json.dumps(data)
    legacy = next(t for t in data["tools"] if t["name"] == "legacy")
    assert legacy["config"]["url"] == "https://x.example.com/a?api_key=[redacted]&page=2"
    gateway = next(c for c in data["connections"] if c["name"] == "gw")
    assert gateway["extra_headers"] == {"X-Team": "a", "X-Auth-Token": "[redacted]"}
    assert gateway["base_url"] == "https://redacted@llm.example.com/v1"
    # Such a document is refused on import, at each path, rather than storing the mask.
    problems = config_plan(tenant=acme, text=as_yaml(data)).problems
    assert {p.path for p in problems} >= {
        "connections[0].base_url",
        "tools[3].config.url",
        "tools[3].config.fixed.headers.Authorization",
        "agents[1].remote_url",
    }


def test_export_then_import_into_another_tenant_then_export_is_equal(configured):
    exported = config_export(tenant=configured.acme)
    plan = config_import(tenant=configured.globex, text=as_yaml(exported))
    assert plan.valid and plan.applied, plan.as_dict()
    assert {c.action for c in plan.changes} == {"create"}
    assert config_export(tenant=configured.globex) == exported
    boss = next(a for a in exported["agents"] if a["slug"] == "boss")
    assert boss["results_without_tools"] is True
    assert Agent.objects.get(tenant=configured.globex, slug="boss").results_without_tools
    # JSON reads the same
    again = config_plan(tenant=configured.globex, text=json.dumps(exported), format="json")
    assert again.valid and again.changes == []


def test_applying_the_same_document_twice_changes_nothing_the_second_time(configured):
    exported = config_export(tenant=configured.acme)
    exported["agents"][0]["instructions"] = "Be brief."
    first = config_import(tenant=configured.acme, text=as_yaml(exported))
    assert changes_of(first) == [("agents", "boss", "update")] and first.applied
    versions = {a.slug: a.version for a in Agent.objects.filter(tenant=configured.acme)}
    tools = {t.name: t.version for t in ToolDefinition.objects.filter(tenant=configured.acme)}
    second = config_import(tenant=configured.acme, text=as_yaml(exported))
    assert second.valid and second.changes == [] and not second.applied
    assert versions == {a.slug: a.version for a in Agent.objects.filter(tenant=configured.acme)}
    assert tools == {
        t.name: t.version for t in ToolDefinition.objects.filter(tenant=configured.acme)
    }


def test_a_dry_run_gives_the_diff_and_changes_nothing(configured):
    acme = configured.acme
    data = config_export(tenant=acme)
    data["tools"][2]["description"] = "Look a customer up."
    data["connections"][0]["default_model"] = "offline-2"
    data["crews"].append({"slug": "solo", "name": "Solo", "members": ["support"]})
    before = config_export(tenant=acme)
    plan = config_import(tenant=acme, text=as_yaml(data), dry_run=True)
    assert plan.valid and not plan.applied
    assert changes_of(plan) == [
        ("connections", "main", "update"),
        ("tools", "find_customer", "update"),
        ("crews", "solo", "create"),
    ]
    assert plan.changes[1].fields == {
        "description": {"from": "Call find_customer.", "to": "Look a customer up."}
    }
    assert plan.changes[0].fields == {"default_model": {"from": "offline-demo", "to": "offline-2"}}
    assert config_export(tenant=acme) == before


def test_objects_absent_from_the_document_stay_unless_it_prunes(configured):
    acme = configured.acme
    data = {"version": 1, "crews": [{"slug": "solo", "name": "Solo", "members": ["support"]}]}
    plan = config_import(tenant=acme, text=as_yaml(data))
    assert changes_of(plan) == [("crews", "solo", "create")]
    assert Crew.objects.filter(tenant=acme).count() == 2
    pruned = config_import(tenant=acme, text=as_yaml(data), prune=True)
    assert not pruned.valid  # solo's member would be deleted: the reference is refused
    assert [(p.path, p.reason) for p in pruned.problems] == [
        ("crews[0].members[0]", "unknown agent 'support'")
    ]
    data = {"version": 1, "tools": [{"name": "calc", "kind": "builtin",
                                     "config": {"builtin": "calculator"}}]}  # fmt: skip
    pruned = config_import(tenant=acme, text=as_yaml(data), prune=True)
    assert pruned.applied, pruned.as_dict()
    assert ("agents", "support", "delete") in changes_of(pruned)
    assert ("connections", "main", "delete") in changes_of(pruned)
    assert list(ToolDefinition.objects.filter(tenant=acme).values_list("name", flat=True)) == [
        "calc"
    ]
    assert not Agent.objects.filter(tenant=acme).exists()
    assert not Crew.objects.filter(tenant=acme).exists()


def test_importing_into_one_tenant_never_reads_or_touches_another(configured):
    acme, globex = configured.acme, configured.globex
    before = config_export(tenant=acme)
    data = {
        "version": 1,
        "agents": [{"slug": "support", "name": "Globex support", "connection": "main"}],
        "crews": [{"slug": "desk", "name": "Desk", "members": ["boss"]}],
    }
    plan = config_import(tenant=globex, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("agents[0].connection", "unknown connection 'main'"),
        ("crews[0].members[0]", "unknown agent 'boss'"),
    ]
    del data["agents"][0]["connection"]
    data["crews"] = []
    assert config_import(tenant=globex, text=as_yaml(data)).applied
    assert config_export(tenant=acme) == before
    assert Agent.objects.get(tenant=globex, slug="support").name == "Globex support"


def test_a_stored_secret_is_kept_by_its_reference_and_cleared_without_one(configured):
    acme = configured.acme
    make_http_tool(
        acme, "billing", "https://billing.example.com/x", config={"auth": {"type": "bearer"}},
        secret=PLANTED,
    )  # fmt: skip
    data = config_export(tenant=acme)
    billing = next(t for t in data["tools"] if t["name"] == "billing")
    billing["description"] = "Billing."
    assert config_import(tenant=acme, text=as_yaml(data)).applied
    assert ToolDefinition.objects.get(tenant=acme, name="billing").secret == PLANTED
    # Without the reference the tool's auth has no credential: refused, nothing cleared.
    billing["secret"] = None
    plan = config_import(tenant=acme, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("tools[0].secret", "bearer auth needs a secret: name it")
    ]
    del billing["config"]["auth"]
    assert config_import(tenant=acme, text=as_yaml(data)).applied
    assert ToolDefinition.objects.get(tenant=acme, name="billing").secret is None


def test_a_secret_the_tenant_does_not_hold_is_refused(configured):
    acme, globex = configured.acme, configured.globex
    make_connection(acme, "claude", kind="anthropic", api_key=PLANTED)
    data = {"version": 1, "connections": config_export(tenant=acme)["connections"]}
    plan = config_import(tenant=globex, text=as_yaml(data))
    [(path, reason)] = [(p.path, p.reason) for p in plan.problems]
    assert path == "connections[0].secret"
    assert "holds no secret 'connection:claude'" in reason
    data["connections"][0]["secret"] = "connection:main"
    plan = config_import(tenant=acme, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("connections[0].secret", "secrets are named after their object: write 'connection:claude'")
    ]
    assert not ProviderConnection.objects.filter(tenant=globex).exists()


def test_a_model_rule_refusing_a_change_rolls_everything_back_with_its_path(configured):
    globex = configured.globex
    data = {
        "version": 1,
        "connections": [{"name": "local", "kind": "offline"}],
        "agents": [{"slug": "helper", "name": "Helper", "connection": "local",
                    "approval": {"deciders": "group", "group": None}}],
    }  # fmt: skip
    plan = config_import(tenant=globex, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("agents[0].approval.group", "name the group whose members decide")
    ]
    data["agents"][0]["approval"]["group"] = "leads"
    group_create(tenant=globex, name="leads")
    data["agents"][0]["temperature"] = 1.5
    data["agents"][0]["model"] = "not-allowed"
    data["connections"][0]["allowed_models"] = ["offline-demo"]
    data["connections"][0]["default_model"] = "offline-demo"
    plan = config_import(tenant=globex, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("agents[0].model", "the connection does not allow this model")
    ]
    # A rule only the model knows: an openai connection needs its key.
    data["agents"][0]["model"] = ""
    data["connections"].append({"name": "gpt", "kind": "openai"})
    plan = config_import(tenant=globex, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("connections[1].secret", "An API key is required.")
    ]
    assert not plan.applied
    assert not ProviderConnection.objects.filter(tenant=globex).exists()
    assert not Agent.objects.filter(tenant=globex).exists()


def test_the_tenants_policy_is_imported_and_covers_the_tools_left_in_place(configured):
    acme = configured.acme
    make_http_tool(acme, "post_it", "https://x.example.com/notes", method="POST")
    data = {"version": 1, "policy": {"require_confirmation_for_writes": True}}
    plan = config_import(tenant=acme, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        (
            "policy.require_confirmation_for_writes",
            "these tools, which the document leaves in place, write without confirmation: post_it",
        )
    ]
    ToolDefinition.objects.filter(tenant=acme, name="post_it").update(requires_approval=True)
    plan = config_import(tenant=acme, text=as_yaml(data))
    assert changes_of(plan) == [("policy", "policy", "update")] and plan.applied
    acme.refresh_from_db()
    assert acme.require_confirmation_for_writes
    assert config_export(tenant=acme)["policy"] == {
        "require_confirmation_for_writes": True,
        "time_zone": "UTC",
    }


def test_the_tenants_time_zone_is_in_the_policy_checked_applied_and_audited(configured):
    acme = configured.acme
    for bad in ("Mars/Olympus", "localtime", "../../etc/passwd", 7):
        data = {"version": 1, "policy": {"time_zone": bad}}
        plan = config_import(tenant=acme, text=as_yaml(data))
        assert [p.path for p in plan.problems] == ["policy.time_zone"], bad
        assert not plan.applied
    acme.refresh_from_db()
    assert acme.time_zone == "UTC"
    data = {"version": 1, "policy": {"time_zone": "Europe/Lisbon"}}
    dry = config_import(tenant=acme, text=as_yaml(data), dry_run=True)
    assert changes_of(dry) == [("policy", "policy", "update")] and not dry.applied
    plan = config_import(tenant=acme, text=as_yaml(data))
    assert plan.applied
    acme.refresh_from_db()
    assert acme.time_zone == "Europe/Lisbon"
    assert config_export(tenant=acme)["policy"]["time_zone"] == "Europe/Lisbon"
    assert acme.audit_entries.filter(changes__time_zone=["UTC", "Europe/Lisbon"]).exists()
    assert changes_of(config_import(tenant=acme, text=as_yaml(data))) == []  # idempotent


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("version: [\n", "not valid YAML"),
        ("a: &x 1\nb: *x\n", "aliases"),
        ("x: " + "y" * 1_000_001, "larger than"),
        ("- 1\n", "must be a mapping"),
    ],
)
def test_an_unreadable_document_is_a_problem_and_changes_nothing(configured, text, reason):
    before = config_export(tenant=configured.acme)
    plan = config_import(tenant=configured.acme, text=text)
    [problem] = plan.problems
    assert problem.path == "" and reason in problem.reason
    assert config_export(tenant=configured.acme) == before


def test_a_document_may_not_break_the_dependencies_of_tools_it_leaves_in_place(configured):
    # create_note (in place) takes customer_id from find_customer's $.id.
    data = config_export(tenant=configured.acme)
    find = next(t for t in data["tools"] if t["name"] == "find_customer")
    find["output_schema"] = {"type": "object", "properties": {"uid": {"type": "integer"}}}
    plan = config_import(tenant=configured.acme, text=as_yaml({"version": 1, "tools": [find]}))
    assert [(p.path, p.reason) for p in plan.problems] == [
        (
            "tools",
            "tool 'create_note', which the document leaves in place, depends_on.customer_id."
            "path: 'find_customer''s output_schema has no field at $.id",
        )
    ]
    # Changing both in one document, in either order, is fine: the end state is checked.
    note = next(t for t in data["tools"] if t["name"] == "create_note")
    note["depends_on"]["customer_id"]["path"] = "$.uid"
    for tools in ([find, note], [note, find]):
        plan = config_import(tenant=configured.acme, text=as_yaml({"version": 1, "tools": tools}))
        assert plan.valid, plan.as_dict()
    assert (
        ToolDefinition.objects.get(name="create_note").depends_on["customer_id"]["path"] == "$.uid"
    )


def test_the_demo_tenants_configuration_round_trips(trio):
    seed_demo_connection(trio.acme)
    seed_demo_agent(trio.acme)
    exported = config_export(tenant=trio.acme)
    assert config_import(tenant=trio.globex, text=as_yaml(exported)).applied
    assert config_export(tenant=trio.globex) == exported
