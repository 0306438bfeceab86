"""An agent's memory settings (scope, retention, memory for key runs) on each face that
configures an agent: the page, the admin, REST and the configuration document (and its
published schema, tests/agents/test_config_loading.py)."""

from __future__ import annotations

import json

import pytest

from agents.config_document import config_export, config_import
from agents.models import Agent
from tests.agents.test_admin import agent_form as admin_form
from tests.api.test_resources import as_key, assert_error
from tests.factories import login, make_agent
from tests.web.test_config import agent_data, url

pytestmark = pytest.mark.django_db
SETTINGS = ("memory", "memory_scope", "memory_retention_days", "memory_key_runs")


def settings_of(tenant, slug: str) -> tuple:
    agent = Agent.objects.get(tenant=tenant, slug=slug)
    return tuple(getattr(agent, name) for name in SETTINGS)


def test_the_agent_page_sets_memory_scope_retention_and_key_runs(client, trio):
    login(client, trio.alice)
    page = client.get(url("agent_create")).content.decode()
    for name in SETTINGS:
        assert f'name="{name}"' in page
    client.post(
        url("agent_create"),
        agent_data(
            memory="on", memory_scope="agent", memory_retention_days="30", memory_key_runs="on"
        ),
    )
    assert settings_of(trio.acme, "support") == (True, "agent", 30, True)
    client.post(url("agent_create"), agent_data(slug="plain", memory="on"))  # the defaults
    assert settings_of(trio.acme, "plain") == (True, "person", None, False)


def test_the_page_refuses_a_bad_scope_or_retention(client, trio):
    login(client, trio.alice)
    for bad in ({"memory_scope": "everyone"}, {"memory_retention_days": "0"}):
        response = client.post(url("agent_create"), agent_data(**bad))
        assert response.status_code == 400 and not Agent.objects.filter(slug="support").exists()


def test_the_admin_sets_them(client, trio):
    agent = make_agent(trio.acme, "keeper")
    login(client, trio.alice)
    change = f"/admin/agents/agent/{agent.pk}/change/"
    form = admin_form(slug="keeper", memory="on", memory_scope="tenant")
    form |= {"memory_retention_days": "7", "memory_key_runs": "on"}
    assert client.post(change, form).status_code == 302
    assert settings_of(trio.acme, "keeper") == (True, "tenant", 7, True)


def test_rest_sets_them_and_refuses_bad_values(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/agents", {"slug": "keeper", "name": "Keeper", "memory": True})
    body = created.json()
    assert (body["memory_scope"], body["memory_retention_days"], body["memory_key_runs"]) == (
        "person", None, False,
    )  # fmt: skip
    patched = api.patch(
        "/agents/keeper",
        {"memory_scope": "agent", "memory_retention_days": 90, "memory_key_runs": True},
    )
    assert patched.status_code == 200, patched.json()
    assert settings_of(trio.acme, "keeper") == (True, "agent", 90, True)
    for bad in ({"memory_scope": "key"}, {"memory_retention_days": -1}, {"memory_key_runs": "x"}):
        assert set(bad) <= set(assert_error(api.patch("/agents/keeper", bad), 400)["details"])
    assert settings_of(trio.acme, "keeper") == (True, "agent", 90, True)


def test_the_configuration_document_carries_them_to_another_tenant(trio):
    make_agent(
        trio.acme, "keeper", memory=True, memory_scope="tenant", memory_retention_days=14,
        memory_key_runs=True,
    )  # fmt: skip
    exported = config_export(tenant=trio.acme)
    entry = next(a for a in exported["agents"] if a["slug"] == "keeper")
    assert (entry["memory_scope"], entry["memory_retention_days"], entry["memory_key_runs"]) == (
        "tenant", 14, True,
    )  # fmt: skip
    plan = config_import(tenant=trio.globex, text=json.dumps(exported), format="json")
    assert plan.valid and plan.applied, plan.as_dict()
    assert settings_of(trio.globex, "keeper") == (True, "tenant", 14, True)


def test_the_configuration_document_refuses_a_bad_scope_at_its_path(trio):
    exported = config_export(tenant=trio.acme)
    exported["agents"] = [{"slug": "keeper", "name": "Keeper", "memory_scope": "key"}]
    plan = config_import(tenant=trio.acme, text=json.dumps(exported), format="json")
    assert not plan.valid and not plan.applied
    assert "memory_scope" in json.dumps(plan.as_dict())
    assert not Agent.objects.filter(slug="keeper").exists()
