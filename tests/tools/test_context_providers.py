"""Context providers' domains and their periodic health check (`tools.check_context_providers`):
an MCP connection against a real MCP server on 127.0.0.1 recorded ok, then failing with a
clean reason once the server is stopped; knowledge bases by embedder; reasons in our words,
never a secret or a library's text."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from rag.models import KnowledgeBase
from tests.factories import make_connection, make_mcp_connection
from tests.fakes.mcp_server import FakeMcpServer
from tools.context_providers import (
    clean_reason,
    health_check_kinds,
    mcp_failure_reason,
    validate_domains,
)
from tools.models import McpServerConnection
from tools.runtime.mcp_client import McpUnavailable
from tools.tasks import check_context_providers

TOKEN = "mcp-s3cret-token-42"


@pytest.fixture
def fake_mcp(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = FakeMcpServer(token=TOKEN)
    yield server
    server.close()


def test_both_kinds_of_provider_are_checked():
    assert set(health_check_kinds()) >= {"mcp", "knowledge_base"}


def test_domains_come_from_the_fixed_list_once_each():
    validate_domains(["tasks", "vault", "codebase"])
    validate_domains([])
    with pytest.raises(ValidationError, match="Unknown domain: weather"):
        validate_domains(["weather"])
    with pytest.raises(ValidationError, match="once"):
        validate_domains(["tasks", "tasks"])


def test_a_knowledge_base_covers_knowledge_and_documents_by_default(trio):
    handbook = KnowledgeBase.objects.create(tenant=trio.acme, slug="h", name="H")
    assert handbook.domains == ["knowledge", "documents"]
    assert handbook.health.status == "unknown" and handbook.health.checked_at is None


def test_the_health_task_records_ok_then_failing_once_the_server_stops(trio, fake_mcp, settings):
    settings.CONTEXT_PROVIDER_HEALTH_S = 60
    connection = make_mcp_connection(trio.acme, fake_mcp.url, auth_header=TOKEN, timeout_s=3)
    outcome = check_context_providers()
    assert outcome["mcp"] == {"ok": 1, "failing": 0}
    connection.refresh_from_db()
    health = connection.health
    assert health.status == "ok" and health.reason == "" and health.checked_at is not None
    assert connection.tool_count >= 4

    assert check_context_providers()["mcp"] == {"ok": 0, "failing": 0}  # not due yet

    fake_mcp.close()
    McpServerConnection.objects.filter(pk=connection.pk).update(
        last_refreshed_at=timezone.now() - timedelta(seconds=61)
    )
    assert check_context_providers()["mcp"] == {"ok": 0, "failing": 1}
    connection.refresh_from_db()
    health = connection.health
    assert health.status == "failing"
    assert health.reason == (
        f"{fake_mcp.url}: cannot connect (the connection was refused or the host is unreachable)"
    )
    assert TOKEN not in health.reason and "Errno" not in health.reason


def test_disabled_connections_are_not_checked(trio, fake_mcp):
    make_mcp_connection(trio.acme, fake_mcp.url, auth_header=TOKEN, enabled=False)
    assert check_context_providers()["mcp"] == {"ok": 0, "failing": 0}


def test_knowledge_bases_are_checked_by_their_embedder(trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    lexical = KnowledgeBase.objects.create(
        tenant=trio.acme, slug="words", name="Words", embedder="lexical"
    )
    connection = make_connection(
        trio.acme, "Embeddings", "openai", api_key="sk-kb-secret-key-123",
        base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=3,
    )  # fmt: skip
    provider = KnowledgeBase.objects.create(
        tenant=trio.acme, slug="vectors", name="Vectors", embedder="provider",
        provider_connection=connection, embedding_model="text-embedding-3-small",
    )  # fmt: skip
    outcome = check_context_providers()["knowledge_base"]
    assert outcome == {"ok": 1, "failing": 1}
    lexical.refresh_from_db()
    provider.refresh_from_db()
    assert lexical.health.status == "ok" and lexical.health_checked_at is not None
    assert provider.health.status == "failing"
    assert (
        provider.health.reason == "the embedding provider (Embeddings) cannot be reached or failed"
    )
    assert check_context_providers()["knowledge_base"] == {"ok": 0, "failing": 0}


def test_an_embedder_change_forgets_the_last_check(trio):
    from rag.services import knowledge_base_save

    handbook = KnowledgeBase.objects.create(
        tenant=trio.acme, slug="h", name="H", embedder="lexical"
    )
    check_context_providers()
    handbook.refresh_from_db()
    assert handbook.health.status == "ok"
    knowledge_base_save(tenant=trio.acme, knowledge_base=handbook, changes={"chunk_size": 500})
    handbook.refresh_from_db()
    assert handbook.health.status == "unknown"


def test_mcp_reasons_are_ours_and_never_carry_the_secret_or_library_text():
    url = "https://crm.example/mcp"
    cases = {
        "timed out after 3 s": f"{url}: timed out after 3 s",
        "the server refused the credentials (HTTP 401)": (
            f"{url}: the server refused the credentials (HTTP 401)"
        ),
        "the server answered HTTP 502: Bad gateway from nginx Bearer tok-9876543210": (
            f"{url}: the server answered HTTP 502"
        ),
        "destination 10.0.0.1 is not allowed (private)": (
            f"{url}: destination 10.0.0.1 is not allowed (private)"
        ),
        "cannot connect ([Errno 111] Connection refused)": (
            f"{url}: cannot connect (the connection was refused or the host is unreachable)"
        ),
        "cannot resolve host crm.example": f"{url}: cannot resolve the host name",
        "MCP error: Method not allowed: Bearer tok-9876543210": (
            f"{url}: the server answered with an MCP protocol error"
        ),
        "MCP error: Traceback with Authorization: Bearer tok-9876543210": (
            f"{url}: the server answered with an MCP protocol error"
        ),
        "KeyError: 'Authorization: Bearer tok-9876543210'": (
            f"{url}: the server's answer could not be used as MCP"
        ),
    }
    for reason, expected in cases.items():
        said = mcp_failure_reason(McpUnavailable(url, reason), secret="Bearer tok-9876543210")
        assert said == expected
        assert "tok-9876543210" not in said


def test_clean_reason_masks_secrets_and_bounds_the_text():
    assert clean_reason("token tok-123456789 refused\n", secrets=["tok-123456789"]) == (
        "token [redacted] refused"
    )
    assert clean_reason("Bearer abcdefghij", secrets=["Bearer abcdefghij"]) == "[redacted]"
    assert len(clean_reason("x" * 5000)) == 500


def test_a_registered_tool_source_declares_its_domains(trio, monkeypatch):
    from agents import tool_sources
    from tests.factories import make_agent
    from tools.runtime.tool import Tool

    monkeypatch.setattr(tool_sources, "_sources", list(tool_sources._sources))
    monkeypatch.setattr(tool_sources, "_source_domains", dict(tool_sources._source_domains))
    with pytest.raises(ValueError, match="Unknown domain: weather"):
        tool_sources.add_tool_source(lambda agent: None, label="odd", domains=("weather",))

    def agenda(agent) -> Tool:
        return Tool(
            name="agenda", description="Today's meetings.",
            input_schema={"type": "object"}, handler=lambda: [],
        )  # fmt: skip

    tool_sources.add_tool_source(agenda, label="calendar app", domains=("calendar",))
    agent = make_agent(trio.acme, "planner", use_all_tools=False, tool_names=["calculator"])
    providers = tool_sources.agent_context_providers(agent)
    assert [(p.kind, p.name, p.domains, p.tools) for p in providers] == [
        ("tool_source", "calendar app", ["calendar"], ["agenda"])
    ]
    assert providers[0].health.status == "unknown" and providers[0].id is None
