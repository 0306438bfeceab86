"""An agent's compaction settings (threshold, summarising connection and model): the same
rules on its page, over REST, in the admin's model and in the configuration document."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from agents.config_document import config_export, config_import
from agents.conversations import threshold_of
from agents.models import Agent
from tests.api.test_resources import as_key, assert_error
from tests.factories import login, make_agent, make_connection
from tests.web.test_config import agent_data, url


@pytest.fixture
def mini(trio):
    return make_connection(
        trio.acme, "Mini", "openai", api_key="sk-mini", default_model="gpt-mini",
        allowed_models=["gpt-mini"],
    )  # fmt: skip


def test_the_threshold_defaults_to_the_history_budget(trio, settings):
    settings.HISTORY_TOKEN_BUDGET = 12_000
    agent = make_agent(trio.acme, "plain")
    assert threshold_of(agent) == 12_000
    agent.compaction_threshold = 3000
    assert threshold_of(agent) == 3000


def test_the_model_refuses_bounds_and_another_tenants_connection(trio, mini):
    agent = make_agent(trio.acme, "summing")
    for threshold in (999, 2_000_001):
        agent.compaction_threshold = threshold
        with pytest.raises(ValidationError) as refused:
            agent.full_clean()
        assert "compaction_threshold" in refused.value.message_dict
    agent.compaction_threshold = 1000
    agent.compaction_connection = make_connection(trio.globex, "Theirs", "offline")
    with pytest.raises(ValidationError) as refused:
        agent.full_clean()
    assert refused.value.message_dict["compaction_connection"] == [
        "Choose one of this tenant's connections."
    ]


def test_rest_sets_and_refuses_the_compaction_settings(client, trio, mini):
    api = as_key(client, trio.acme)
    created = api.post(
        "/agents",
        {"slug": "long", "name": "Long", "compaction_threshold": 5000,
         "compaction_connection": mini.pk, "compaction_model": "gpt-mini"},
    )  # fmt: skip
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["compaction_threshold"], body["compaction_connection"]) == (5000, mini.pk)
    assert body["compaction_model"] == "gpt-mini"
    bad = api.patch("/agents/long", {"compaction_threshold": 10})
    assert "compaction_threshold" in assert_error(bad, 400)["details"]
    theirs = make_connection(trio.globex, "Theirs", "offline")
    bad = api.patch("/agents/long", {"compaction_connection": theirs.pk})
    assert "compaction_connection" in assert_error(bad, 400)["details"]
    bad = api.patch("/agents/long", {"compaction_model": "gpt-huge"})  # not allowed there
    assert_error(bad, 400)
    agent = Agent.objects.get(tenant=trio.acme, slug="long")
    assert (agent.compaction_threshold, agent.compaction_model) == (5000, "gpt-mini")


def test_the_agent_page_sets_the_compaction_settings(client, trio, mini):
    login(client, trio.alice)
    page = client.get(url("agent_create")).content.decode()
    assert "Long conversations" in page and 'name="compaction_threshold"' in page
    data = agent_data(
        compaction_threshold="4000", compaction_connection=str(mini.pk), compaction_model=""
    )
    assert client.post(url("agent_create"), data).status_code == 302
    agent = Agent.objects.get(tenant=trio.acme, slug="support")
    assert (agent.compaction_threshold, agent.compaction_connection) == (4000, mini)
    refused = client.post(url("agent_edit", slug="support"), {**data, "compaction_threshold": "5"})
    assert refused.status_code == 400 and "Between 1,000 and 2,000,000" in refused.content.decode()
    agent.refresh_from_db()
    assert agent.compaction_threshold == 4000


def test_the_document_exports_imports_and_checks_the_compaction_settings(trio, mini):
    make_agent(trio.acme, "long", compaction_threshold=6000, compaction_connection=mini)
    [entry] = [a for a in config_export(tenant=trio.acme)["agents"] if a["slug"] == "long"]
    assert entry["compaction"] == {"threshold": 6000, "connection": "Mini", "model": ""}

    document = {
        "version": 1,
        "connections": [{"name": "local", "kind": "offline", "default_model": "offline-demo",
                         "allowed_models": ["offline-demo"]}],
        "agents": [{"slug": "helper", "name": "Helper", "connection": "local",
                    "compaction": {"threshold": 10, "connection": "nowhere", "model": ""}}],
    }  # fmt: skip
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert {p.path for p in plan.problems} == {"agents[0].compaction.threshold"}
    document["agents"][0]["compaction"]["threshold"] = 2000
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("agents[0].compaction.connection", "unknown connection 'nowhere'")
    ]
    document["agents"][0]["compaction"] = {"threshold": 2000, "model": "gpt-4o"}
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("agents[0].compaction.model", "the connection does not allow this model")
    ]
    document["agents"][0]["compaction"] = {"threshold": 2000, "connection": "local"}
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert not plan.problems and plan.applied
    helper = Agent.objects.get(tenant=trio.globex, slug="helper")
    assert helper.compaction_threshold == 2000 and helper.compaction_connection.name == "local"


def test_the_admin_sets_the_compaction_settings_of_this_tenants_connections_only(
    client, trio, agent, mini
):
    from tests.agents.test_admin import agent_form

    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/change/"
    page = client.get(url).content.decode()
    assert "Long conversations" in page and 'name="compaction_threshold"' in page
    theirs = make_connection(trio.globex, "Theirs", "offline")
    refused = client.post(url, agent_form(compaction_connection=str(theirs.pk)))
    assert refused.status_code == 200 and "compaction_connection" in refused.content.decode()
    saved = client.post(
        url, agent_form(compaction_threshold="3000", compaction_connection=str(mini.pk))
    )
    assert saved.status_code == 302
    agent.refresh_from_db()
    assert (agent.compaction_threshold, agent.compaction_connection) == (3000, mini)
