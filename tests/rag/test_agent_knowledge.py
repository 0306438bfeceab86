"""An agent linked to knowledge bases gets `knowledge_search` bound to them in its runs."""

from __future__ import annotations

import json

import pytest

from agents.runs import run_inline
from rag.ingestion import ingest
from rag.services import document_add, knowledge_base_save
from tests.factories import login
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = "# Leave\n\nEvery employee gets 27 days of paid leave a year, plus public holidays."


def lexical_base(tenant, slug: str, text: str):
    base = knowledge_base_save(
        tenant=tenant, changes={"name": slug.title(), "slug": slug, "embedder": "lexical"}
    )
    document = document_add(tenant=tenant, knowledge_base=base, title="Handbook", text=text)
    ingest(document.pk)
    return base


def test_a_linked_knowledge_base_is_searched_in_the_run_with_citations(
    trio, agent, provider_server
):
    base = lexical_base(trio.acme, "handbook", HANDBOOK)
    lexical_base(trio.globex, "theirs", HANDBOOK.replace("27", "99"))  # same words, other tenant
    base.agents.add(agent)
    agent.use_all_tools, agent.tool_names = False, ["calculator"]  # picked by name only
    agent.save()
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("k1", "knowledge_search", '{"query": "paid leave days"}')]),
        TextReply("27 days [1]."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="How much leave do I get?")
    assert run.status == "succeeded", run.error
    first = provider_server.requests_to("/v1/chat/completions")[0].body
    offered = {t["function"]["name"] for t in first["tools"]}
    assert offered == {"calculator", "knowledge_search", "file_read"}
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    results = json.loads(told["content"])["results"]
    assert results and all("27 days" in r["text"] and "99" not in r["text"] for r in results)
    assert results[0]["citation"] == "[1]" and results[0]["document_title"] == "Handbook"


def test_an_agent_without_knowledge_bases_has_no_knowledge_tool(trio, agent, provider_server):
    provider_server.script("openai", TextReply("Hi."))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded", run.error
    first = provider_server.requests_to("/v1/chat/completions")[0].body
    offered = {t["function"]["name"] for t in first.get("tools", [])}
    assert "knowledge_search" not in offered and "file_read" not in offered


def test_the_chat_shows_the_sources_under_the_answer_and_members_can_read_them(
    client, trio, agent, provider_server
):
    from agents.services import conversation_save
    from rag.models import Document

    base = lexical_base(trio.acme, "handbook", HANDBOOK)
    base.agents.add(agent)
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": ""}, owner_user=trio.bob
    )
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("k1", "knowledge_search", '{"query": "paid leave"}')]),
        TextReply("27 days [1]."),
    )
    run_inline(
        tenant=trio.acme, agent=agent, input="Leave?", conversation=chat, initiated_by=trio.bob
    )
    document = Document.objects.get(knowledge_base=base)
    login(client, trio.bob)  # a member
    page = client.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    sources = page[page.index('aria-label="Sources"') :]
    assert f"/t/acme/chat/sources/{document.pk}/" in sources and "Handbook" in sources
    assert "27 days of paid leave" in sources  # the snippet
    source = client.get(f"/t/acme/chat/sources/{document.pk}/")
    assert source.status_code == 200 and "27 days of paid leave" in source.content.decode()
    login(client, trio.charlie)  # globex's owner
    assert client.get(f"/t/acme/chat/sources/{document.pk}/").status_code == 404
    assert client.get(f"/t/globex/chat/sources/{document.pk}/").status_code == 404
