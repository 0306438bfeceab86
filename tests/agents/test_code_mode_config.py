"""The code-mode option on each face that configures an agent: the page, the admin, REST and
the configuration document; and the name run_code kept from tenants' tools."""

from __future__ import annotations

import json

import pytest

from agents.config_document import config_export, config_import
from agents.models import Agent
from agents.specs import agent_spec
from tests.agents.test_admin import agent_form as admin_form
from tests.api.test_resources import as_key, assert_error
from tests.factories import login, make_agent
from tests.web.test_config import agent_data, url
from tools.runtime.definitions import tool_name_refusal

pytestmark = pytest.mark.django_db


def test_the_agent_page_turns_code_mode_on_and_shows_a_programs_limits(client, trio, settings):
    settings.CODE_MODE_TIME_S, settings.CODE_MODE_MEMORY_MB = 3, 64
    settings.CODE_MODE_OUTPUT_CHARS, settings.CODE_MODE_TOOL_CALLS = 20000, 7
    login(client, trio.alice)
    page = client.get(url("agent_create")).content.decode()
    assert 'name="code_mode"' in page
    assert "Each program: 3 s of execution, 64 MB of memory, 20000 characters of output, " in page
    assert "7 tool calls." in page
    client.post(url("agent_create"), agent_data(code_mode="on"))
    assert Agent.objects.get(tenant=trio.acme, slug="support").code_mode is True


def test_the_admin_turns_code_mode_on(client, trio):
    agent = make_agent(trio.acme, "coder")
    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/change/"
    assert 'name="code_mode"' in client.get(url).content.decode()
    assert client.post(url, admin_form(code_mode="on", slug="coder")).status_code == 302
    agent.refresh_from_db()
    assert agent.code_mode is True


def test_rest_sets_code_mode_and_refuses_a_value_that_is_not_a_boolean(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/agents", {"slug": "coder", "name": "Coder"})
    assert created.json()["code_mode"] is False
    patched = api.patch("/agents/coder", {"code_mode": True})
    assert patched.status_code == 200 and patched.json()["code_mode"] is True
    assert Agent.objects.get(tenant=trio.acme, slug="coder").code_mode is True
    bad = api.patch("/agents/coder", {"code_mode": "sometimes"})
    assert "code_mode" in assert_error(bad, 400)["details"]
    assert Agent.objects.get(tenant=trio.acme, slug="coder").code_mode is True


def test_the_configuration_document_carries_code_mode_to_another_tenant(trio):
    make_agent(trio.acme, "coder", code_mode=True)
    exported = config_export(tenant=trio.acme)
    assert next(a for a in exported["agents"] if a["slug"] == "coder")["code_mode"] is True
    plan = config_import(tenant=trio.globex, text=json.dumps(exported), format="json")
    assert plan.valid and plan.applied, plan.as_dict()
    assert Agent.objects.get(tenant=trio.globex, slug="coder").code_mode is True


def test_the_runs_spec_takes_code_mode_and_the_limits_from_the_settings(trio, settings):
    settings.CODE_MODE_TIME_S, settings.CODE_MODE_TOOL_CALLS = 3, 7
    spec = agent_spec(make_agent(trio.acme, "coder", code_mode=True), None)
    assert spec.code_mode is True
    assert (spec.code_limits.time_s, spec.code_limits.tool_calls) == (3, 7)


def test_a_tenant_tool_may_not_be_named_run_code():
    assert "platform provides" in tool_name_refusal("run_code", "http", {})
