"""Knowledge bases (settings and linked agents, never documents) and MCP server connections
(never their auth header) in the configuration document: export, plan, apply, the compiler's
checks, and the same checks on every per-object save."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agents.config_document import config_export, config_import
from agents.runtime.config.compiler import ConfigInvalid, compile_config
from agents.runtime.config.loading import dump_document
from rag.models import KnowledgeBase
from rag.services import knowledge_base_save
from tests.factories import make_agent, make_connection
from tools.mcp_connections import mcp_connection_save
from tools.models import McpServerConnection

pytestmark = pytest.mark.django_db

TOKEN = "Bearer mcp-PLANTED-token-5151"


@pytest.fixture
def configured(trio):
    acme = trio.acme
    make_connection(acme, "emb", "openai", api_key="sk-emb", default_model="gpt-test")
    support = make_agent(acme, "support")
    knowledge_base_save(
        tenant=acme,
        changes={"slug": "handbook", "name": "Handbook", "chunk_size": 300, "agents": [support]},
    )
    McpServerConnection.objects.create(
        tenant=acme, name="crm", url="https://mcp.example.com/mcp", auth_header=TOKEN
    )
    return trio


def as_yaml(data: dict[str, Any]) -> str:
    return dump_document(data, "yaml")


def test_the_export_holds_knowledge_bases_and_mcp_servers_without_secrets(configured):
    data = config_export(tenant=configured.acme)
    assert data["knowledge_bases"] == [
        {
            "slug": "handbook",
            "name": "Handbook",
            "description": "",
            "embedder": "static",
            "connection": None,
            "embedding_model": "",
            "dimensions": None,
            "chunk_size": 300,
            "chunk_overlap": 60,
            "domains": ["knowledge", "documents"],
            "agents": ["support"],
        }
    ]
    assert data["mcp_servers"] == [
        {
            "name": "crm",
            "url": "https://mcp.example.com/mcp",
            "secret": "mcp:crm",
            "auth_mode": "header",
            "oauth_scope": "",
            "oauth_client_id": "",
            "enabled": True,
            "tool_prefix": "crm",
            "allowed_tool_names": [],
            "context_resource_uri": "",
            "tool_examples": {},
            "timeout_s": 30.0,
            "domains": [],
        }
    ]
    assert "mcp-PLANTED" not in as_yaml(data)
    again = config_import(tenant=configured.acme, text=as_yaml(data))
    assert again.valid and again.changes == []  # idempotent


def test_a_document_changes_creates_and_prunes_knowledge_bases_and_mcp_servers(configured):
    acme = configured.acme
    data = config_export(tenant=acme)
    data["knowledge_bases"][0]["chunk_size"] = 500
    data["knowledge_bases"][0]["agents"] = []
    data["knowledge_bases"].append(
        {"slug": "faq", "name": "FAQ", "embedder": "provider", "connection": "emb",
         "embedding_model": "text-embedding-3-small", "agents": ["support"]}
    )  # fmt: skip
    data["mcp_servers"][0]["allowed_tool_names"] = ["search"]
    data["mcp_servers"][0]["tool_examples"] = {"search": [{"arguments": {"q": "refund"}}]}
    data["mcp_servers"].append({"name": "docs", "url": "https://docs.example.com/mcp"})
    plan = config_import(tenant=acme, text=as_yaml(data), dry_run=True)
    assert plan.valid, plan.problems
    assert {(c.section, c.name, c.action) for c in plan.changes} == {
        ("knowledge_bases", "handbook", "update"),
        ("knowledge_bases", "faq", "create"),
        ("mcp_servers", "crm", "update"),
        ("mcp_servers", "docs", "create"),
    }
    assert not KnowledgeBase.objects.filter(slug="faq").exists()  # a dry run
    assert config_import(tenant=acme, text=as_yaml(data)).applied
    handbook = KnowledgeBase.objects.get(tenant=acme, slug="handbook")
    assert handbook.chunk_size == 500 and list(handbook.agents.all()) == []
    faq = KnowledgeBase.objects.get(tenant=acme, slug="faq")
    assert faq.provider_connection.name == "emb" and [a.slug for a in faq.agents.all()] == [
        "support"
    ]
    crm = McpServerConnection.objects.get(tenant=acme, name="crm")
    assert crm.allowed_tool_names == ["search"] and crm.auth_header == TOKEN  # kept
    assert crm.tool_examples == {"search": [{"arguments": {"q": "refund"}}]}
    assert McpServerConnection.objects.get(tenant=acme, name="docs").auth_header is None

    data["knowledge_bases"] = data["knowledge_bases"][1:]
    data["mcp_servers"] = data["mcp_servers"][1:]
    pruned = config_import(tenant=acme, text=as_yaml(data), prune=True)
    assert pruned.applied
    assert list(KnowledgeBase.objects.filter(tenant=acme).values_list("slug", flat=True)) == ["faq"]
    assert list(McpServerConnection.objects.filter(tenant=acme).values_list("name", flat=True)) == [
        "docs"
    ]


def problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigInvalid) as caught:
        compile_config(data)
    return [(p.path, p.reason) for p in caught.value.problems]


def test_the_compiler_refuses_unknown_links_and_credentials_in_an_mcp_url():
    data = {
        "version": 1,
        "agents": [{"slug": "support", "name": "Support"}],
        "knowledge_bases": [
            {"slug": "kb", "name": "KB", "agents": ["support", "nobody"]},
            {"slug": "p", "name": "P", "embedder": "provider", "connection": "none"},
            {"slug": "c", "name": "C", "chunk_size": 100, "chunk_overlap": 100},
        ],
        "mcp_servers": [
            {"name": "crm", "url": "https://user:pw@mcp.example.com/mcp"},
            {"name": "q", "url": "https://mcp.example.com/mcp?token=abc"},
            {"name": "crm", "url": "gopher://x"},
        ],
    }
    found = problems(data)
    assert ("knowledge_bases[0].agents[1]", "unknown agent 'nobody'") in found
    assert ("knowledge_bases[1].connection", "unknown connection 'none'") in found
    assert ("knowledge_bases[1].embedding_model", "name the embedding model") in found
    assert ("knowledge_bases[2].chunk_overlap", "must be smaller than chunk_size") in found
    paths = [path for path, _ in found]
    assert "mcp_servers[0].url" in paths and "mcp_servers[1].url" in paths
    assert ("mcp_servers[2].name", "'crm' appears twice in mcp_servers") in found
    assert ("mcp_servers[2].url", "give an http:// or https:// URL with a host") in found
    assert problems({"version": 1, "mcp_servers": [{"name": "x", "url": "u", "token": "t"}]}) == [
        ("mcp_servers[0].token", "unknown field")
    ]


def test_an_import_with_a_bad_link_changes_nothing(configured):
    data = config_export(tenant=configured.acme)
    data["knowledge_bases"][0]["agents"] = ["ghost"]
    plan = config_import(tenant=configured.acme, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("knowledge_bases[0].agents[0]", "unknown agent 'ghost'")
    ]
    assert not plan.applied


def test_per_object_saves_of_knowledge_bases_and_mcp_servers_are_compiled_too(trio):
    with pytest.raises(ValidationError) as caught:
        mcp_connection_save(
            tenant=trio.acme,
            changes={"name": "crm", "url": "https://mcp.example.com/mcp?api_key=abc"},
        )
    assert "url" in caught.value.message_dict
    assert not McpServerConnection.objects.exists()
    theirs = make_agent(trio.globex, "theirs")
    with pytest.raises(ValidationError):  # another tenant's agent: refused, never linked
        knowledge_base_save(
            tenant=trio.acme, changes={"slug": "kb", "name": "KB", "agents": [theirs]}
        )
    assert not KnowledgeBase.objects.exists()
