"""Triggers that start a workflow (agents/triggers.py): a schedule's and a webhook's run is a
workflow run whose input is the rendered template read as JSON; REST, the config page and
the configuration document name the workflow by its slug."""

from __future__ import annotations

import json
import time

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from agents import runs
from agents.config_document import config_export, config_import, config_plan
from agents.models import Run, Trigger, WorkflowDefinition
from agents.runs.engine import execute_run
from agents.runtime import triggers as rules
from agents.triggers import HookRefused, fire_due_triggers, trigger_save, webhook_deliver
from tests.agents.test_triggers import make_due, principal
from tests.factories import login

pytestmark = pytest.mark.django_db

CITY_INPUT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


GREET = {
    "input": CITY_INPUT,
    "steps": [{"id": "hello", "transform": "join('', ['Hello, ', input.city, '!'])"}],
}


@pytest.fixture
def greeting(trio) -> WorkflowDefinition:
    return WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="greet", name="Greet", definition=GREET
    )


def save(trio, **changes) -> Trigger:
    fields = {"name": "t", "kind": "schedule", "cron": "0 9 * * *", **changes}
    return trigger_save(tenant=trio.acme, by=principal(trio.acme, trio.alice), changes=fields)


def deliver(saved, payload) -> Run:
    body = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    signed = rules.sign(saved.secret, stamp, body)
    return webhook_deliver(
        public_id=saved.trigger.public_id, body=body, timestamp=stamp, signature=signed
    ).run


def test_a_schedule_starts_its_workflow_with_the_template_read_as_json(trio, greeting):
    trigger = save(
        trio, workflow=greeting, input_template='{"city": "Paris", "at": "{{fired_at}}"}'
    ).trigger
    assert trigger.target == greeting and trigger.agent is None
    make_due(trigger)

    assert fire_due_triggers() == 1

    run = Run.objects.get(trigger=trigger)
    assert run.workflow_id == greeting.pk and run.initiated_by_user == trio.alice
    assert json.loads(run.input)["city"] == "Paris"
    assert execute_run(run.pk) == "succeeded"
    assert Run.objects.get(pk=run.pk).output == "Hello, Paris!"


def test_a_webhook_passes_its_body_and_bad_input_is_refused_with_400(trio, greeting):
    saved = save(trio, kind="webhook", cron="", workflow=greeting, input_template="{{payload}}")

    run = deliver(saved, {"city": "Oslo"})
    assert run.workflow_id == greeting.pk and json.loads(run.input) == {"city": "Oslo"}
    with pytest.raises(HookRefused) as refused:  # the workflow's input schema says no
        deliver(saved, {"town": "Oslo"})
    assert refused.value.status == 400 and "does not fit the workflow" in str(refused.value)

    text = save(trio, name="text", kind="webhook", cron="", workflow=greeting,
                input_template="City: {{payload.city}}")  # fmt: skip
    with pytest.raises(HookRefused) as refused:
        deliver(text, {"city": "Oslo"})
    assert refused.value.status == 400 and "not JSON" in str(refused.value)
    assert Run.objects.filter(workflow=greeting).count() == 1


def test_exactly_one_target_and_another_tenants_workflow_is_refused(trio, greeting, agent):
    with pytest.raises(ValidationError) as refused:
        save(trio, workflow=greeting, agent=agent, input_template="{}")
    assert "one agent, one crew or one workflow" in str(refused.value)
    theirs = WorkflowDefinition.objects.create(tenant=trio.globex, slug="x", name="X")
    with pytest.raises(ValidationError) as refused:
        save(trio, workflow=theirs, input_template="{}")
    assert "agent" in refused.value.message_dict


def test_rest_the_page_and_the_document_name_the_workflow(client, trio, greeting):
    api = login(APIClient(), trio.alice, tenant="acme")
    made = api.post(
        "/api/v1/triggers",
        {"name": "hook", "kind": "webhook", "workflow": "greet", "input_template": "{{payload}}"},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["workflow"] == "greet" and made.json()["agent"] is None
    unknown = api.post(
        "/api/v1/triggers",
        {"name": "h2", "kind": "webhook", "workflow": "nope", "input_template": "{{payload}}"},
        format="json",
    )
    assert unknown.status_code == 400 and "workflow" in unknown.json()["error"]["details"]

    page = login(client, trio.alice).get("/t/acme/triggers/new/").content.decode()
    assert '<option value="workflow:greet">Greet</option>' in page
    listed = client.get("/t/acme/triggers/").content.decode()
    assert "Greet <small>(workflow)</small>" in listed

    [entry] = config_export(tenant=trio.acme)["triggers"]
    assert entry["workflow"] == "greet" and entry["agent"] is None


def test_a_template_nested_too_deep_is_refused_not_a_crash(trio, greeting):
    deep = "[" * 4000 + "]" * 4000
    saved = save(trio, kind="webhook", cron="", workflow=greeting, input_template=deep)
    with pytest.raises(HookRefused) as refused:
        deliver(saved, {"city": "Oslo"})
    assert refused.value.status == 400
    nested = {"city": "x", "more": [[[[[]]]]]}
    for _ in range(3000):
        nested = {"a": nested}
    with pytest.raises(ValidationError):
        runs.workflow_start(tenant=trio.acme, workflow=greeting, input=nested)
    assert not Run.objects.filter(workflow=greeting).exists()


def test_a_document_imports_a_trigger_of_a_workflow_and_refuses_an_unknown_one(trio, greeting):
    trigger = {
        "name": "daily-greeting", "kind": "schedule", "cron": "0 9 * * *",
        "workflow": "greet", "input_template": '{"city": "Paris"}', "run_as": "alice",
    }  # fmt: skip
    plan = config_import(tenant=trio.acme, text=json.dumps({"version": 1, "triggers": [trigger]}))
    assert plan.valid and plan.applied, plan.as_dict()
    assert Trigger.objects.get(name="daily-greeting").workflow == greeting

    unknown = {**trigger, "name": "other", "workflow": "nope"}
    plan = config_plan(tenant=trio.acme, text=json.dumps({"version": 1, "triggers": [unknown]}))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("triggers[0].workflow", "unknown workflow 'nope'")
    ]
    both = {**trigger, "name": "both", "agent": "greet"}
    plan = config_plan(tenant=trio.acme, text=json.dumps({"version": 1, "triggers": [both]}))
    assert ("triggers[0].agent", "Choose one agent, one crew or one workflow.") in [
        (p.path, p.reason) for p in plan.problems
    ]
