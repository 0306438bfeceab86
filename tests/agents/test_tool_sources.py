"""effective_tools: one answer to "which tools does this agent get", which the admin page,
the web config page and an actual run agree on (knowledge search and memory included)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.runs import run_inline
from agents.tool_sources import effective_tools
from rag.services import knowledge_base_save
from tests.factories import PASSWORD
from tests.fakes.provider_server import TextReply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)  # the knowledge links' version commits

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
MEMORY = {"remember_fact", "recall_facts", "forget_fact"}


@pytest.fixture
def configured(trio, agent):
    """acme's agent: two picked tools (a built-in and a definition), an excluded one and an
    unknown one, memory, an output schema and a linked knowledge base."""
    ToolDefinition.objects.create(
        tenant=trio.acme,
        name="lookup",
        description="Look something up.",
        kind="http",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        config={"method": "GET", "url": "https://api.example.com/lookup"},
    )
    base = knowledge_base_save(
        tenant=trio.acme, changes={"name": "Handbook", "slug": "handbook", "embedder": "lexical"}
    )
    base.agents.add(agent)
    agent.use_all_tools = False
    agent.tool_names = ["calculator", "lookup", "think", "nosuchtool"]
    agent.tool_exclude = ["think"]
    agent.memory = True
    agent.output_schema = SCHEMA
    agent.save()
    return agent


def admin_tools(client, agent) -> set[str]:
    page = client.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()
    table = re.search(r'<table id="effective-tools">.*?</table>', page, re.S).group(0)
    return set(re.findall(r"<code>([^<]+)</code>", table))


def config_tools(body: str) -> set[str]:
    section = re.search(r'<section id="effective-tools".*?</section>', body, re.S).group(0)
    return set(re.findall(r"<code>([^<]+)</code>", section))


def offered_in_a_run(trio, agent, provider_server, user="alice") -> set[str]:
    """The tools of the first model request of a run started by `user` (None: an API key
    acting for nobody)."""
    before = len(provider_server.requests_to("/v1/chat/completions"))
    provider_server.script("openai", TextReply("Hi."))
    run_inline(tenant=trio.acme, agent=agent, input="hi", initiated_by=user and getattr(trio, user))
    first = provider_server.requests_to("/v1/chat/completions")[before].body
    return {tool["function"]["name"] for tool in first.get("tools", [])}


def test_the_admin_the_config_page_and_a_run_offer_the_same_tools(
    client, trio, configured, provider_server
):
    tools = effective_tools(configured)
    expected = {"calculator", "lookup", "knowledge_search", "file_read", *MEMORY, "final_answer"}
    assert set(tools.offered.names()) == expected
    assert {t.name: t.source for t in tools} == {
        "calculator": "built-in",
        "lookup": "tenant definition",
        "knowledge_search": "knowledge",
        "file_read": "knowledge",
        **dict.fromkeys(MEMORY, "memory"),
        "final_answer": "structured output",
    }
    assert tools.unknown == ("nosuchtool",)

    assert client.login(username=trio.alice.username, password=PASSWORD)
    assert admin_tools(client, configured) == expected
    edit = reverse("config:agent_edit", kwargs={"tenant_slug": "acme", "slug": "assistant"})
    page = client.get(edit).content.decode()
    assert config_tools(page) == expected
    partial = reverse("config:agent_tools", kwargs={"tenant_slug": "acme"})
    assert f"{partial}?agent=assistant" in page  # the picker's preview keeps the agent's own
    picked = {"tool_names": ["calculator", "lookup"], "memory": "on", "output_schema": ""}
    preview = client.post(f"{partial}?agent=assistant", picked).content.decode()
    assert config_tools(preview) == {
        "calculator", "lookup", "knowledge_search", "file_read", *MEMORY
    }  # fmt: skip
    assert offered_in_a_run(trio, configured, provider_server) == expected
    # A run without a user (an API key's) is offered all but the memory tools.
    assert offered_in_a_run(trio, configured, provider_server, user=None) == expected - MEMORY


def test_a_simple_agent_is_offered_no_tools_anywhere(client, trio, configured, provider_server):
    configured.kind = "simple"
    configured.save()
    assert len(effective_tools(configured)) == 0
    assert client.login(username=trio.alice.username, password=PASSWORD)
    assert admin_tools(client, configured) == set()
    edit = reverse("config:agent_edit", kwargs={"tenant_slug": "acme", "slug": "assistant"})
    assert config_tools(client.get(edit).content.decode()) == set()
    assert offered_in_a_run(trio, configured, provider_server) == set()
