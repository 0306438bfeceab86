"""Model prices, quotas and triggers in the configuration document: exported (a webhook's
secret never), compiled with each refusal at its path, imported with a diff, idempotent,
round-tripped into an empty tenant, a new webhook's secret in the import's answer once, and
kept apart between tenants."""

from __future__ import annotations

import copy
import json
import uuid
from decimal import Decimal
from typing import Any

import jsonschema
import pytest

from agents.config_document import config_export, config_import, config_plan
from agents.models import Quota, Trigger
from agents.runtime.config.compiler import ConfigInvalid, KnownNames, compile_config
from agents.runtime.config.document import document_json_schema
from agents.runtime.config.loading import dump_document
from agents.triggers import trigger_save
from providers.models import ModelPrice
from providers.runtime.price_rules import PRICE_KINDS
from providers.services import price_save
from tenancy.models import ApiKey, Role
from tenancy.policy import Principal
from tests.factories import add_member, make_agent, make_crew, make_tenant, make_user

pytestmark = pytest.mark.django_db

PRICE = {
    "provider": "openai",
    "model": "gpt-4o",
    "input": 2.5,
    "output": 10,
    "cached_input": 1.25,
    "cache_write": 2.5,
}


def api_key(tenant, name: str = "ci") -> ApiKey:
    return ApiKey.objects.create(
        tenant=tenant, name=name, prefix=uuid.uuid4().hex[:12], secret_hash="x" * 64
    )


def owner(tenant, user) -> Principal:
    return Principal.for_initiator(tenant, user)


@pytest.fixture
def configured(trio):
    """acme with a price, three quotas (tenant, agent, member, key) and two triggers."""
    acme = trio.acme
    support = make_agent(acme, "support")
    desk = make_crew(acme, "desk", [support])
    price_save(
        tenant=acme,
        changes={
            "provider_kind": "openai", "model": "gpt-4o", "input_price": Decimal("2.5"),
            "output_price": Decimal("10"), "cached_input_price": Decimal("1.25"),
            "cache_write_price": Decimal("2.5"),
        },
    )  # fmt: skip
    key = api_key(acme)
    Quota.objects.create(tenant=acme, scope="tenant", metric="cost", period="month", limit=50)
    Quota.objects.create(
        tenant=acme, scope="agent", agent=support, metric="tokens", period="day", limit=100_000
    )
    Quota.objects.create(
        tenant=acme, scope="member", user=trio.bob, metric="cost", period="day", limit="0.75"
    )
    Quota.objects.create(
        tenant=acme, scope="api_key", api_key=key, metric="tokens", period="month", limit=10**6
    )
    by = owner(acme, trio.alice)
    trigger_save(
        tenant=acme, by=by,
        changes={"name": "daily", "kind": "schedule", "crew": desk, "cron": "0 9 * * 1-5",
                 "timezone": "Europe/Berlin", "input_template": "Report for {{fired_at}}"},
    )  # fmt: skip
    hook = trigger_save(
        tenant=acme, by=by,
        changes={"name": "issues", "kind": "webhook", "agent": support, "run_as": trio.bob,
                 "input_template": "Triage: {{payload.issue.title}}"},
    )  # fmt: skip
    trio.hook_secret = hook.secret
    return trio


def text(data: dict[str, Any]) -> str:
    return json.dumps(data)


# -- export ------------------------------------------------------------------------------------
def test_the_export_holds_prices_quotas_and_triggers_never_a_webhooks_secret(configured):
    data = config_export(tenant=configured.acme)
    assert data["prices"] == [PRICE]
    assert data["quotas"] == [
        {"scope": "agent", "member": None, "api_key": None, "agent": "support",
         "metric": "tokens", "period": "day", "limit": 100000, "active": True},
        {"scope": "api_key", "member": None, "api_key": "ci", "agent": None,
         "metric": "tokens", "period": "month", "limit": 1000000, "active": True},
        {"scope": "member", "member": "bob", "api_key": None, "agent": None,
         "metric": "cost", "period": "day", "limit": 0.75, "active": True},
        {"scope": "tenant", "member": None, "api_key": None, "agent": None,
         "metric": "cost", "period": "month", "limit": 50, "active": True},
    ]  # fmt: skip
    assert data["triggers"] == [
        {"name": "daily", "kind": "schedule", "agent": None, "crew": "desk", "workflow": None,
         "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin",
         "input_template": "Report for {{fired_at}}", "enabled": True, "run_as": "alice"},
        {"name": "issues", "kind": "webhook", "agent": "support", "crew": None, "workflow": None,
         "cron": "",
         "timezone": "UTC", "input_template": "Triage: {{payload.issue.title}}",
         "enabled": True, "run_as": "bob"},
    ]  # fmt: skip
    hook = Trigger.objects.get(name="issues")
    for format in ("json", "yaml"):
        shown = dump_document(data, format)
        assert configured.hook_secret not in shown and hook.public_id not in shown


def test_the_published_schema_takes_the_export_and_refuses_a_webhooks_secret(configured):
    validator = jsonschema.Draft202012Validator(document_json_schema())
    data = config_export(tenant=configured.acme)
    assert list(validator.iter_errors(data)) == []
    data["triggers"][1]["secret"] = "whsec_x"
    assert list(validator.iter_errors(data))


# -- round trip and idempotence ---------------------------------------------------------------
def test_export_import_into_an_empty_tenant_export_round_trips_and_a_second_import_is_a_no_op(
    configured,
):
    exported = config_export(tenant=configured.acme)
    initech = make_tenant("initech", owner=configured.alice)
    add_member(initech, configured.bob, Role.MEMBER)
    api_key(initech)  # API keys are not in a document: the one its quota names
    plan = config_import(tenant=initech, text=dump_document(exported, "yaml"))
    assert plan.valid and plan.applied, plan.as_dict()
    created = {(c.section, c.name) for c in plan.changes if c.action == "create"}
    assert {
        ("prices", "openai/gpt-4o"),
        ("quotas", "agent:support/tokens/day"),
        ("quotas", "member:bob/cost/day"),
        ("quotas", "api_key:ci/tokens/month"),
        ("quotas", "tenant/cost/month"),
        ("triggers", "daily"),
        ("triggers", "issues"),
    } <= created
    assert config_export(tenant=initech) == exported
    # The new webhook has a secret of its own, in this answer only.
    [made] = plan.new_secrets
    hook = Trigger.objects.get(tenant=initech, name="issues")
    assert made.name == "issues" and made.secret == hook.secret != configured.hook_secret
    assert f"POST /hooks/{hook.public_id}" in made.note and "rotate" in made.note
    assert plan.as_dict()["new_secrets"][0]["secret"] == hook.secret
    assert hook.secret not in json.dumps([c.as_dict() for c in plan.changes])
    assert Trigger.objects.get(tenant=initech, name="daily").next_fire_at is not None
    again = config_import(tenant=initech, text=dump_document(exported, "json"))
    assert again.valid and again.changes == [] and not again.applied and not again.new_secrets
    assert Trigger.objects.get(tenant=initech, name="issues").secret == hook.secret


def test_a_changed_webhook_keeps_its_secret_and_the_diff_names_the_changed_fields(configured):
    acme = configured.acme
    exported = config_export(tenant=acme)
    exported["triggers"][1]["input_template"] = "New: {{payload.issue.title}}"
    exported["quotas"][3]["limit"] = "60.5"
    exported["prices"][0]["output"] = 12
    plan = config_import(tenant=acme, text=text(exported))
    assert plan.valid and plan.applied and plan.new_secrets == []
    changes = {(c.section, c.name): c.fields for c in plan.changes}
    assert changes == {
        ("prices", "openai/gpt-4o"): {"output": {"from": 10, "to": 12}},
        ("quotas", "tenant/cost/month"): {"limit": {"from": 50, "to": 60.5}},
        ("triggers", "issues"): {
            "input_template": {
                "from": "Triage: {{payload.issue.title}}", "to": "New: {{payload.issue.title}}"
            }
        },
    }  # fmt: skip
    assert Trigger.objects.get(tenant=acme, name="issues").secret == configured.hook_secret
    assert ModelPrice.objects.get(tenant=acme).output_price == Decimal("12")
    assert Quota.objects.get(tenant=acme, scope="tenant").limit == Decimal("60.5")
    assert config_import(tenant=acme, text=text(exported)).changes == []


def test_a_dry_run_says_a_new_webhook_gets_a_secret_and_makes_none(configured):
    exported = config_export(tenant=configured.acme)
    hook = copy.deepcopy(exported["triggers"][1])
    exported["triggers"].append({**hook, "name": "second"})
    plan = config_import(tenant=configured.acme, text=text(exported), dry_run=True)
    [change] = plan.changes
    assert (change.section, change.name, change.action) == ("triggers", "second", "create")
    assert "secret" not in change.fields and "new signing secret" in change.note
    assert plan.new_secrets == [] and not Trigger.objects.filter(name="second").exists()


def test_prune_deletes_the_prices_quotas_and_triggers_the_document_leaves_out(configured):
    acme = configured.acme
    exported = config_export(tenant=acme)
    exported["prices"], exported["quotas"], exported["triggers"] = [], [], []
    plan = config_import(tenant=acme, text=text(exported), prune=True)
    assert plan.applied, plan.as_dict()
    deleted = {(c.section, c.name) for c in plan.changes if c.action == "delete"}
    assert ("triggers", "issues") in deleted and ("prices", "openai/gpt-4o") in deleted
    assert not Trigger.objects.filter(tenant=acme).exists()
    assert not Quota.objects.filter(tenant=acme).exists()
    assert not ModelPrice.objects.filter(tenant=acme).exists()


# -- the compiler: every refusal at its path ---------------------------------------------------
KNOWN = KnownNames(
    agents=frozenset({"support"}),
    crews=frozenset({"desk"}),
    members=frozenset({"alice", "bob"}),
    api_keys=frozenset({"ci"}),
    shared_api_keys=frozenset({"twice"}),
    trigger_min_interval_s=300,
)
QUOTA = {"scope": "tenant", "metric": "tokens", "period": "day", "limit": 1000}
TRIGGER = {
    "name": "daily", "kind": "schedule", "agent": "support", "cron": "0 9 * * *",
    "timezone": "Europe/Berlin", "input_template": "Go", "run_as": "alice",
}  # fmt: skip


def problems(**sections: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigInvalid) as caught:
        compile_config({"version": 1, **sections}, known=KNOWN)
    return [(p.path, p.reason) for p in caught.value.problems]


def test_valid_prices_quotas_and_triggers_compile():
    compile_config(
        {
            "version": 1,
            "prices": [PRICE, {**PRICE, "provider": "anthropic", "model": "claude"}],
            "quotas": [QUOTA, {**QUOTA, "scope": "api_key", "api_key": "ci"}],
            "triggers": [TRIGGER, {**TRIGGER, "name": "b", "agent": None, "crew": "desk"}],
        },
        known=KNOWN,
    )


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({"prices": [{**PRICE, "provider": "acme-ai"}]},
         ("prices[0].provider",
          "unknown price table: one of " + ", ".join(name for name, _ in PRICE_KINDS))),
        ({"prices": [{**PRICE, "input": -1}]},
         ("prices[0].input", "A price cannot be negative.")),
        ({"prices": [{**PRICE, "cache_write": 10001}]},
         ("prices[0].cache_write", "At most 10000 US dollars per million tokens.")),
        ({"prices": [{**PRICE, "model": "  "}]},
         ("prices[0].model", "Name the model, or the beginning of its id.")),
        ({"prices": [PRICE, PRICE]},
         ("prices[1].model", "'openai/gpt-4o' appears twice in prices")),
        ({"quotas": [{**QUOTA, "scope": "agent"}]},
         ("quotas[0].agent", "Choose the agent this limit is for.")),
        ({"quotas": [{**QUOTA, "agent": "support"}]},
         ("quotas[0].agent", "Leave it empty: this limit is not for one agent.")),
        ({"quotas": [{**QUOTA, "scope": "agent", "agent": "nobody"}]},
         ("quotas[0].agent", "unknown agent 'nobody'")),
        ({"quotas": [{**QUOTA, "limit": "10.5"}]},
         ("quotas[0].limit", "A whole number of tokens.")),
        ({"quotas": [{**QUOTA, "scope": "member", "member": "charlie"}]},
         ("quotas[0].member", "no member of this tenant has the username 'charlie'")),
        ({"quotas": [{**QUOTA, "scope": "api_key", "api_key": "gone"}]},
         ("quotas[0].api_key", "unknown API key 'gone'")),
        ({"quotas": [{**QUOTA, "scope": "api_key", "api_key": "twice"}]},
         ("quotas[0].api_key", "several API keys are named 'twice': rename all but one to "
          "name it")),
        ({"quotas": [QUOTA, {**QUOTA, "limit": 5}]},
         ("quotas[1]", "'tenant/tokens/day' appears twice in quotas")),
        ({"triggers": [{**TRIGGER, "cron": "61 * * * *"}]},
         ("triggers[0].cron", "Not a cron expression: its minute (0-59) field is not valid.")),
        ({"triggers": [{**TRIGGER, "cron": "*/1 * * * *"}]},
         ("triggers[0].cron", "This schedule fires more often than once every 300 seconds "
          "(the platform's minimum interval).")),
        ({"triggers": [{**TRIGGER, "timezone": "Mars/Olympus"}]},
         ("triggers[0].timezone", "Unknown time zone 'Mars/Olympus': use an IANA name.")),
        ({"triggers": [{**TRIGGER, "kind": "webhook"}]},
         ("triggers[0].cron", "Only a schedule has a cron expression.")),
        ({"triggers": [{**TRIGGER, "agent": "nobody"}]},
         ("triggers[0].agent", "unknown agent 'nobody'")),
        ({"triggers": [{**TRIGGER, "agent": None, "crew": "nowhere"}]},
         ("triggers[0].crew", "unknown crew 'nowhere'")),
        ({"triggers": [{**TRIGGER, "crew": "desk"}]},
         ("triggers[0].agent", "Choose one agent, one crew or one workflow.")),
        ({"triggers": [{**TRIGGER, "run_as": None}]},
         ("triggers[0].run_as", "Name the member the runs are attributed to.")),
        ({"triggers": [{**TRIGGER, "run_as": "charlie"}]},
         ("triggers[0].run_as", "no member of this tenant has the username 'charlie'")),
        ({"triggers": [TRIGGER, TRIGGER]},
         ("triggers[1].name", "'daily' appears twice in triggers")),
    ],
)  # fmt: skip
def test_each_bad_entry_is_refused_at_its_path(sections, expected):
    assert problems(**sections) == [expected]


def test_a_schedules_template_may_not_read_a_payload():
    [(path, reason)] = problems(triggers=[{**TRIGGER, "input_template": "{{payload.x}}"}])
    assert path == "triggers[0].input_template" and "payload" in reason


@pytest.mark.parametrize(
    ("sections", "path"),
    [
        ({"prices": [{**PRICE, "input": "1.23456"}]}, "prices[0].input"),
        ({"prices": [{**PRICE, "input": "NaN"}]}, "prices[0].input"),
        ({"prices": [{k: v for k, v in PRICE.items() if k != "output"}]}, "prices[0].output"),
        ({"quotas": [{**QUOTA, "period": "week"}]}, "quotas[0].period"),
        ({"quotas": [{**QUOTA, "secret": "x"}]}, "quotas[0].secret"),
        ({"triggers": [{**TRIGGER, "kind": "email"}]}, "triggers[0].kind"),
        ({"triggers": [{**TRIGGER, "secret": "whsec_x"}]}, "triggers[0].secret"),
        ({"triggers": [{**TRIGGER, "input_template": ""}]}, "triggers[0].input_template"),
    ],
)
def test_malformed_entries_are_refused_at_their_path(sections, path):
    assert [p for p, _ in problems(**sections)] == [path]


# -- rules only the services know, reported at their path by the import -----------------------
def test_a_trigger_attributed_to_a_higher_role_is_refused_at_its_run_as(configured):
    acme = configured.acme
    add_member(acme, dana := make_user("dana"), Role.ADMIN)
    exported = config_export(tenant=acme)
    exported["triggers"].append({**exported["triggers"][0], "name": "mine"})  # run_as alice
    plan = config_import(tenant=acme, text=text(exported), by=owner(acme, dana))
    assert not plan.applied
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("triggers[2].run_as",
         "You may not attribute runs to a member with a higher role than yours.")
    ]  # fmt: skip
    assert not Trigger.objects.filter(name="mine").exists()


def test_a_trigger_keeps_its_kind(configured):
    exported = config_export(tenant=configured.acme)
    exported["triggers"][1].update(kind="schedule", cron="0 9 * * *", input_template="Go")
    plan = config_import(tenant=configured.acme, text=text(exported))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("triggers[1].kind", "A trigger keeps its kind: make a new one.")
    ]
    assert Trigger.objects.get(name="issues").kind == "webhook"


# -- tenants apart -----------------------------------------------------------------------------
def test_another_tenants_members_agents_and_keys_are_unknown_and_nothing_leaks(configured):
    exported = config_export(tenant=configured.acme)
    exported["agents"] = exported["crews"] = []  # those the quotas and triggers name: acme's
    globex = configured.globex  # charlie's; alice, bob, agent support and key ci are acme's
    plan = config_plan(tenant=globex, text=text(exported))
    paths = {p.path for p in plan.problems}
    assert {
        "quotas[0].agent",
        "quotas[1].api_key",
        "quotas[2].member",
        "triggers[0].crew",
        "triggers[0].run_as",
        "triggers[1].agent",
        "triggers[1].run_as",
    } <= paths
    reasons = " ".join(p.reason for p in plan.problems)
    assert configured.hook_secret not in reasons
    assert not config_import(tenant=globex, text=text(exported)).applied
    data = config_export(tenant=globex)
    assert data["prices"] == data["quotas"] == data["triggers"] == []
    assert len(config_export(tenant=configured.acme)["triggers"]) == 2


def test_an_import_never_touches_another_tenants_objects_of_the_same_names(configured):
    acme, globex = configured.acme, configured.globex
    make_agent(globex, "support")
    document = {
        "version": 1,
        "prices": [{**PRICE, "output": 99}],
        "quotas": [{**QUOTA, "scope": "agent", "agent": "support"}],
        "triggers": [{**TRIGGER, "kind": "webhook", "cron": "", "name": "issues",
                      "run_as": "charlie", "input_template": "{{payload.x}}"}],
    }  # fmt: skip
    plan = config_import(tenant=globex, text=text(document), by=owner(globex, configured.charlie))
    assert plan.applied, plan.as_dict()
    assert {c.action for c in plan.changes} == {"create"}
    assert ModelPrice.objects.get(tenant=acme).output_price == Decimal("10")
    assert Trigger.objects.get(tenant=acme, name="issues").secret == configured.hook_secret
    assert Trigger.objects.get(tenant=globex, name="issues").secret != configured.hook_secret
    assert Quota.objects.filter(tenant=acme).count() == 4


# -- saves of other objects --------------------------------------------------------------------
def test_renaming_an_agent_that_triggers_quotas_and_crews_name_is_allowed_and_they_follow(
    configured,
):
    """They hold the agent as a relation: the compiled end state names its new slug."""
    from agents.models import Agent
    from agents.services import agent_save

    acme = configured.acme
    agent_save(tenant=acme, agent=Agent.objects.get(slug="support"), changes={"slug": "helpdesk"})
    data = config_export(tenant=acme)
    assert data["crews"][0]["members"] == ["helpdesk"]
    assert data["triggers"][1]["agent"] == "helpdesk"
    assert data["quotas"][0]["agent"] == "helpdesk"
    assert config_import(tenant=acme, text=text(data)).changes == []
