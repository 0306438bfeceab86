"""One plug-in mechanism (base/plugins.py): the platform's own tools, tool sources
and agent kinds come from its entry points, and a package installed beside it adds an agent
kind, a tenant tool source or tools the same way, without a line of the platform changed
(tests/data/plugins: a module and its dist-info, as pip leaves an installed package;
docs/examples/plugins/sample_workflows: a sample plug-in, installed by tests/sample_plugins.py),
each tool recorded as its plug-in's."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from agents.apps import load_plugins
from agents.models import Agent
from agents.runs import run_start, tool_run
from agents.runtime.kinds import KINDS
from agents.signals import run_queued
from agents.tool_sources import _sources, effective_tools
from base import plugins
from base.versions import config_bump
from tests.agents.test_confirmation import settle
from tests.factories import make_agent
from tools import tool_sources
from tools.apps import load_tenant_tool_sources
from tools.loader import tenant_tools
from tools.runtime.builtins import BUILTINS
from tools.tool_sources import ToolOrigin

INSTALLED = Path(__file__).resolve().parents[1] / "data" / "plugins"


def test_the_platforms_own_come_from_its_entry_points():
    tools = {p.name: p for p in plugins.load(plugins.TOOLS)}
    assert set(tools) == {"calculator", "current_time", "think", "llm"}
    assert all(p.package == "agentplatform" and p.own for p in tools.values())
    assert set(BUILTINS.names()) == {"calculator", "current_time", "think", "llm"}
    assert {tool_sources.BUILTIN_ORIGINS[name] for name in BUILTINS.names()} == {
        ToolOrigin("builtin")
    }
    assert {p.name for p in plugins.load(plugins.AGENT_KINDS)} == {
        "orchestrator", "simple", "remote"
    }  # fmt: skip
    assert set(KINDS) >= {"orchestrator", "simple", "remote"}
    assert [label for _, label in _sources] == ["knowledge", "knowledge", "memory"]
    assert {p.name for p in plugins.load(plugins.TENANT_TOOL_SOURCES)} == {"mcp", "workflows"}
    # (and the workflows exposed as tools, registered by agents' ready(): agents/apps.py)
    assert [source.label for source in tool_sources.SOURCES] == ["MCP server", "workflow"]
    assert dict(tool_sources.SOURCE_ORIGINS) == {
        "MCP server": ToolOrigin("mcp"),
        "workflow": ToolOrigin("workflow"),
    }


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.syspath_prepend(str(INSTALLED))
    importlib.invalidate_caches()
    yield
    KINDS.pop("echo", None)


@pytest.mark.django_db(transaction=True)
def test_a_custom_kind_from_an_installed_package_works_without_editing_the_platform(
    trio, connection, installed, monkeypatch
):
    with pytest.raises(ValidationError, match="kind"):
        Agent(tenant=trio.acme, name="E", slug="e", kind="echo").full_clean()
    [found] = [p for p in plugins.load(plugins.AGENT_KINDS) if p.name == "echo"]
    assert found.package == "sample-agent-kind"

    load_plugins()  # as at the next start (of this process: a Celery worker of this
    # session has not loaded the package, so the run is executed here only)
    monkeypatch.setattr(run_queued, "receivers", [])

    agent = make_agent(trio.acme, "echo", kind="echo")
    agent.full_clean()
    run = settle(run_start(tenant=trio.acme, agent=agent, input="hello", initiated_by=trio.alice))
    assert (run.status, run.output) == ("succeeded", "olleh")
    assert run.events.filter(type="run.started").exists()


@pytest.mark.django_db
def test_a_tenant_tool_source_from_an_installed_package_adds_tools_to_every_tenant(
    trio, installed, monkeypatch
):
    monkeypatch.setattr(tool_sources, "SOURCES", list(tool_sources.SOURCES))
    monkeypatch.setattr(tool_sources, "SOURCE_ORIGINS", dict(tool_sources.SOURCE_ORIGINS))
    load_tenant_tool_sources()  # as at the next start
    config_bump(trio.acme.pk)
    toolbox = tenant_tools(trio.acme)
    assert toolbox.registry.has("greet") and toolbox.sources["greet"] == "greetings"
    assert toolbox.origins["greet"] == ToolOrigin("plugin", "greetings", "sample-agent-kind")
    assert toolbox.sources.get("calculator") == "built-in"
    assert toolbox.origins["calculator"] == ToolOrigin("builtin")
    agent = make_agent(trio.acme, "greeter")
    assert "greet" in {item.name for item in effective_tools(agent)}
    config_bump(trio.acme.pk)


def test_no_tenant_has_the_sample_workflows_unless_they_are_installed(trio):
    assert not BUILTINS.has("compound_interest")
    for tenant in (trio.acme, trio.globex):
        assert not tenant_tools(tenant).registry.has("compound_interest")


def test_an_installed_sample_plugin_gives_every_tenant_its_workflow_as_its_own(
    trio, sample_workflows
):
    [found] = [p for p in plugins.load(plugins.TOOLS) if p.name == "compound_interest"]
    assert (found.package, found.own) == ("sample-workflows", False)
    origin = ToolOrigin("plugin", "compound_interest", "sample-workflows")
    for tenant in (trio.acme, trio.globex):
        toolbox = tenant_tools(tenant)
        assert toolbox.origins["compound_interest"] == origin
        assert toolbox.sources["compound_interest"] == "compound_interest"
    arguments = {"principal": 1000, "annual_rate_percent": 5, "years": 10}
    result = tool_run(tenant=trio.acme, name="compound_interest", arguments=arguments)
    assert result.error is None and result.result["balance"] == 1647.01
    agent = make_agent(trio.acme, "saver")
    offered = {item.name: item.source for item in effective_tools(agent)}
    assert offered["compound_interest"] == "compound_interest"


def test_memory_is_a_tool_source_offered_when_the_agent_remembers(trio):
    remembers = make_agent(trio.acme, "remembers", memory=True)
    forgets = make_agent(trio.acme, "forgets", memory=False)
    offered = {item.name: item.source for item in effective_tools(remembers)}
    assert {offered[n] for n in ("remember_fact", "recall_facts", "forget_fact")} == {"memory"}
    assert not {"remember_fact", "recall_facts"} & {i.name for i in effective_tools(forgets)}


def test_a_plugin_that_cannot_load_stops_the_start_naming_it(tmp_path, monkeypatch):
    info = tmp_path / "broken_kind-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-kind\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[agentplatform.agent_kinds]\nbad = no_such_module:x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    with pytest.raises(plugins.PluginError, match=r"plug-in 'bad' .* of broken-kind cannot be"):
        plugins.load(plugins.AGENT_KINDS)
