"""MCP server connections as context providers, against a real MCP server (the SDK's
MCPServer on 127.0.0.1): refresh, the tenant registry, agent runs, failures, SSRF."""

from __future__ import annotations

import time

import httpx2
import pytest
from django.core.exceptions import ValidationError
from django.http import Http404
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT

from agents.models import RunEvent
from agents.runs import run_inline, tool_run
from tests.factories import make_mcp_connection
from tests.fakes.mcp_server import HANDBOOK, FakeMcpServer
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply
from tools.loader import registry_for_tenant, tenant_tools
from tools.mcp_connections import mcp_connection_refresh, mcp_connection_test
from tools.models import McpServerConnection, ToolDefinition
from tools.runtime.egress import EgressPolicy
from tools.runtime.mcp_client import (
    McpEndpoint,
    McpUnavailable,
    capability_from_annotations,
    mcp_call_tool,
)
from tools.runtime.mcp_session import _reason
from tools.runtime.tool import Effect
from tools.tasks import refresh_mcp_connections

TOKEN = "mcp-s3cret-token-42"


@pytest.fixture
def fake_mcp(settings):
    """The SDK's MCP server on a thread, in-process (tests/mcp's `mcp_server` is ours, live)."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = FakeMcpServer(token=TOKEN)
    yield server
    server.close()


@pytest.fixture
def docs(trio, fake_mcp) -> McpServerConnection:
    return make_mcp_connection(
        trio.acme,
        fake_mcp.url,
        auth_header=TOKEN,
        context_resource_uri="context://handbook",
        timeout_s=5,
    )


def mcp_names(tenant) -> list[str]:
    return sorted(n for n in registry_for_tenant(tenant).names() if "__" in n)


# -- refresh and the registry ------------------------------------------------------------
def test_refresh_imports_the_tools_with_prefix_tags_and_capabilities(trio, docs, fake_mcp):
    assert mcp_names(trio.acme) == []  # nothing before the first refresh
    connection = mcp_connection_refresh(docs)
    assert (connection.status, connection.last_error) == ("ok", "")
    assert connection.last_refreshed_at is not None
    assert {t["name"] for t in connection.tools_cache} == {"add", "echo", "fail", "wipe", "nap"}
    assert mcp_names(trio.acme) == [
        "docs__add", "docs__echo", "docs__fail", "docs__nap", "docs__wipe",
    ]  # fmt: skip
    registry = registry_for_tenant(trio.acme)
    add = registry.get("docs__add")
    assert add.tags == {"context", "context:docs"}
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert (add.capability.effect, add.capability.idempotent) == (Effect.READ, True)
    wipe = registry.get("docs__wipe").capability
    assert (wipe.effect, wipe.idempotent) == (Effect.DESTRUCTIVE, True)
    echo = registry.get("docs__echo").capability  # no annotations: the spec's defaults
    assert (echo.effect, echo.idempotent) == (Effect.DESTRUCTIVE, False)
    assert (
        registry.filter(tags=["context:docs"]).names() == registry.filter(tags=["context"]).names()
    )
    assert registry.has("calculator")  # built-ins stay
    assert all(r["authorization"] == f"Bearer {TOKEN}" for r in fake_mcp.requests)


def test_the_context_resource_becomes_a_context_block(trio, docs):
    mcp_connection_refresh(docs)
    assert docs.context_text == HANDBOOK
    assert tenant_tools(trio.acme).context_blocks == {"docs": ("Context from docs", HANDBOOK)}


def test_allowed_tool_names_filter_and_a_custom_prefix(trio, docs):
    docs.allowed_tool_names = ["add", "echo"]
    docs.tool_prefix = "kb"
    docs.save()
    mcp_connection_refresh(docs)
    assert mcp_names(trio.acme) == ["kb__add", "kb__echo"]
    assert len(docs.tools_cache) == 5  # the listing is kept whole; the filter applies on load


def test_a_disabled_connection_contributes_nothing(trio, docs):
    mcp_connection_refresh(docs)
    docs.enabled = False
    docs.save()
    assert mcp_names(trio.acme) == []
    assert tenant_tools(trio.acme).context_blocks == {}


def test_remote_tools_that_cannot_be_tools_here_are_skipped_not_fatal(trio, docs, caplog):
    mcp_connection_refresh(docs)
    docs.tools_cache = [
        *docs.tools_cache,
        {"name": "bad", "description": "x", "input_schema": {"type": "object",
         "properties": {"q": {"type": "nonsense"}}}, "annotations": {}},
        {"name": "pattern", "description": "x", "input_schema": {"type": "object",
         "properties": {"q": {"type": "string", "pattern": "(unclosed"}}}, "annotations": {}},
        {"name": "a.dotted.name", "description": "x", "input_schema": {}, "annotations": {}},
        {"name": "anyof", "description": "", "annotations": {},
         "input_schema": {"type": "object", "properties": {"v": {"anyOf": [{"type": "string"},
                          {"type": "integer"}]}}}},
    ]  # fmt: skip
    docs.save()
    names = mcp_names(trio.acme)
    assert "docs__add" in names and "docs__anyof" in names
    assert not {"docs__bad", "docs__pattern", "docs__a.dotted.name"} & set(names)
    assert "skipped" in caplog.text
    anyof = registry_for_tenant(trio.acme).get("docs__anyof")
    assert anyof.description == "The anyof tool of the docs MCP server."
    assert anyof.validate({"v": 1.5}) is not None  # the fallback validator checks anyOf


def test_a_tenant_tool_cannot_take_a_connection_tools_name(trio, docs, caplog):
    """`<prefix>__<tool>` names are the connections': refused at save, and a row stored
    around the rule is skipped, so the connection's tool keeps its name."""
    taken = ToolDefinition(
        tenant=trio.acme, name="docs__add", kind="builtin", config={"builtin": "calculator"}
    )
    with pytest.raises(ValidationError) as exc:
        taken.full_clean()
    assert "reserved for tools of MCP connections" in exc.value.message_dict["name"][0]
    ToolDefinition.objects.bulk_create([taken])  # written around the rule
    mcp_connection_refresh(docs)
    assert "context" in registry_for_tenant(trio.acme).get("docs__add").tags
    assert "tool docs__add of tenant" in caplog.text and "skipped" in caplog.text
    assert "docs__echo" in mcp_names(trio.acme)


def test_model_rules(trio):
    connection = McpServerConnection(tenant=trio.acme, name="Docs Hub", url="ftp://x")
    with pytest.raises(ValidationError) as exc:
        connection.full_clean()
    assert "name" in exc.value.message_dict and "url" in exc.value.message_dict
    bad = McpServerConnection(
        tenant=trio.acme, name="docs", url="https://example.com/mcp", tool_prefix="9x",
        allowed_tool_names="add", timeout_s=0,
    )  # fmt: skip
    with pytest.raises(ValidationError) as exc:
        bad.full_clean()
    errors = exc.value.message_dict
    assert "lower-case letter" in errors["tool_prefix"][0]
    assert "list of tool names" in errors["allowed_tool_names"][0]
    assert "timeout_s" in errors
    ok = McpServerConnection(tenant=trio.acme, name="docs-hub", url="https://example.com/mcp")
    ok.full_clean()
    assert ok.tool_prefix == "docs_hub"
    ok.save()
    clash = McpServerConnection(tenant=trio.acme, name="docs_hub", url="https://example.com/m")
    with pytest.raises(ValidationError, match="prefix"):
        clash.full_clean()  # the derived prefix is taken
    assert "mcp-s3" not in repr(ok)


# -- calls ---------------------------------------------------------------------------------
def test_a_call_through_the_registry_reaches_the_server_with_the_header(trio, docs, fake_mcp):
    mcp_connection_refresh(docs)
    fake_mcp.requests.clear()
    result = tool_run(tenant=trio.acme, name="docs__add", arguments={"a": 2, "b": 3})
    assert result.error is None and result.result == {"result": 5}
    assert fake_mcp.requests and all(
        r["authorization"] == f"Bearer {TOKEN}" for r in fake_mcp.requests
    )
    invalid = tool_run(tenant=trio.acme, name="docs__add", arguments={"a": "two"})
    assert invalid.error.startswith("invalid arguments")  # checked before any call


def test_the_credential_never_reaches_the_model_or_the_results(trio, docs, fake_mcp):
    mcp_connection_refresh(docs)
    echoed = tool_run(tenant=trio.acme, name="docs__echo", arguments={"text": TOKEN})
    assert echoed.result == {"result": "[redacted]"}  # the registry redacts known secrets
    definitions = str(registry_for_tenant(trio.acme).definitions("openai"))
    assert TOKEN not in definitions


def test_a_remote_is_error_becomes_a_tool_error(trio, docs):
    mcp_connection_refresh(docs)
    result = tool_run(tenant=trio.acme, name="docs__fail", arguments={"reason": "no"})
    assert result.result is None
    assert "the fail tool of MCP server docs reported an error" in result.error
    assert "refused: no" in result.error


def test_a_hung_server_does_not_hang_the_call(trio, docs):
    mcp_connection_refresh(docs)
    docs.timeout_s = 0.5
    docs.save()
    started = time.monotonic()
    result = tool_run(tenant=trio.acme, name="docs__nap", arguments={"seconds": 10})
    # The point is the timeout: back long before the answer (10 s), with 10 times the
    # 0.5 s to spare on a busy machine.
    assert time.monotonic() - started < 5
    assert result.error == f"MCP server docs is unavailable: {docs.url}: timed out after 0.5 s"


@pytest.mark.parametrize(
    "raised",
    [
        TimeoutError(),  # the call's own deadline
        httpx2.ReadTimeout("read"),  # the HTTP client's
        MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out"),  # the SDK's
        ExceptionGroup("task group", [httpx2.ReadTimeout("read")]),
    ],
    ids=["deadline", "client", "sdk", "in-a-task-group"],
)
def test_a_timeout_reads_the_same_whichever_clock_ran_out(raised):
    """Under load any of the three timeouts may fire first: the person reads one message."""
    assert _reason(raised, [], 0.5) == "timed out after 0.5 s"


def test_wrong_credentials_mark_the_connection_unavailable(trio, docs):
    docs.auth_header = "Bearer wrong"
    docs.save()
    connection = mcp_connection_refresh(docs)
    assert connection.status == "unavailable"
    assert connection.last_error.startswith(f"{docs.url}: ")
    assert connection.last_error == (f"{docs.url}: the server refused the credentials (HTTP 401)")


# -- from an agent run -----------------------------------------------------------------------
def test_an_agent_run_calls_the_mcp_tool_and_the_model_reads_the_result(
    trio, agent, docs, provider_server
):
    mcp_connection_refresh(docs)
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "docs__add", '{"a": 2, "b": 40}')]),
        TextReply("It is 42."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="2 + 40?")
    assert run.status == "succeeded", run.error
    assert run.output == "It is 42."
    first = provider_server.requests_to("/v1/chat/completions")[0].body
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"docs__add", "docs__echo", "calculator"} <= offered
    last = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": "c1", "content": '{"result": 42}'}
    assert HANDBOOK in first["messages"][0]["content"]  # its context block is in the prompt


def test_only_agents_that_use_a_providers_tools_get_its_context_block(
    trio, agent, docs, provider_server
):
    mcp_connection_refresh(docs)
    agent.use_all_tools, agent.tool_names = False, ["calculator"]
    agent.save()
    provider_server.script("openai", TextReply("Hello."))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded", run.error
    system = provider_server.requests_to("/v1/chat/completions")[0].body["messages"][0]
    assert HANDBOOK not in system["content"]


def test_server_down_the_run_goes_on_then_refresh_hides_its_tools(
    trio, agent, docs, fake_mcp, provider_server
):
    mcp_connection_refresh(docs)
    fake_mcp.close()
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "docs__add", '{"a": 1, "b": 1}')]),
        TextReply("The docs server is down."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="1 + 1?")
    assert run.status == "succeeded", run.error
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert told["role"] == "tool"
    assert told["content"].startswith(f"MCP server docs is unavailable: {docs.url}: ")
    completed = RunEvent.objects.filter(run=run, type="tool.completed").get().payload
    assert "MCP server docs is unavailable" in completed["error"]

    connection = mcp_connection_refresh(docs)
    assert connection.status == "unavailable"
    assert connection.last_error.startswith(f"{docs.url}: cannot connect")
    assert len(connection.tools_cache) == 5  # kept for when it comes back
    assert mcp_names(trio.acme) == []
    assert tenant_tools(trio.acme).context_blocks == {}
    calculator = tool_run(tenant=trio.acme, name="calculator", arguments={"expression": "2*3"})
    assert calculator.error is None  # the tenant's other tools still work
    with pytest.raises(Http404):  # gone from the registry
        tool_run(tenant=trio.acme, name="docs__add", arguments={"a": 1, "b": 1})
    ok, message, names = mcp_connection_test(docs)
    assert not ok and message.startswith("MCP server docs is unavailable") and names == []


# -- SSRF ------------------------------------------------------------------------------------
def test_a_private_address_not_allowlisted_is_refused(trio, docs, settings):
    settings.EGRESS_ALLOWLIST = []
    connection = mcp_connection_refresh(docs)
    assert connection.status == "unavailable"
    assert connection.last_error == f"{docs.url}: destination 127.0.0.1 is not allowed (loopback)"
    private = make_mcp_connection(trio.acme, "http://10.1.2.3:8080/mcp", "intranet")
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    ok, message, _ = mcp_connection_test(private)
    assert not ok
    assert message == (
        "MCP server intranet is unavailable: http://10.1.2.3:8080/mcp: "
        "destination 10.1.2.3 is not allowed (private)"
    )


def test_a_redirect_to_a_private_address_is_not_followed(trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = LocalServer()
    try:
        server.route("POST", "/mcp", Reply(status=307, headers={"location": "http://10.1.2.3/mcp"}))
        connection = make_mcp_connection(trio.acme, server.url + "/mcp", "hop")
        connection = mcp_connection_refresh(connection)
    finally:
        server.close()
    assert connection.status == "unavailable"
    assert "Redirect to http://10.1.2.3/mcp not followed" in connection.last_error


def test_the_runtime_client_reports_one_error_type(fake_mcp):
    endpoint = McpEndpoint(url=fake_mcp.url, policy=EgressPolicy(), timeout_s=2)
    from asgiref.sync import async_to_sync

    with pytest.raises(McpUnavailable, match="not allowed"):
        async_to_sync(mcp_call_tool)(endpoint, "add", {"a": 1, "b": 2})


def test_capability_mapping_follows_the_spec_defaults():
    def read(annotations):
        capability = capability_from_annotations(annotations, timeout_s=10)
        return capability.effect, capability.idempotent

    assert read({"read_only_hint": True}) == (Effect.READ, True)
    assert read({}) == (Effect.DESTRUCTIVE, False)
    assert read({"destructive_hint": False}) == (Effect.WRITE, False)
    assert read({"destructive_hint": False, "idempotent_hint": True}) == (Effect.WRITE, True)
    assert read({"destructive_hint": True, "idempotent_hint": True}) == (Effect.DESTRUCTIVE, True)


# -- tenancy and the periodic refresh ----------------------------------------------------------
def test_one_tenants_connections_never_reach_another_tenants_registry(trio, docs):
    mcp_connection_refresh(docs)
    assert mcp_names(trio.acme)
    assert mcp_names(trio.globex) == []
    assert tenant_tools(trio.globex).context_blocks == {}
    with pytest.raises(Http404):
        tool_run(tenant=trio.globex, name="docs__add", arguments={"a": 1, "b": 2})


def test_the_periodic_task_refreshes_only_what_is_due(trio, docs, settings):
    settings.MCP_REFRESH_S = 300
    assert refresh_mcp_connections() == {"ok": 1, "unavailable": 0}
    assert refresh_mcp_connections() == {"ok": 0, "unavailable": 0}  # fresh: not due
    settings.MCP_REFRESH_S = 0
    assert refresh_mcp_connections() == {"ok": 1, "unavailable": 0}
    McpServerConnection.objects.filter(pk=docs.pk).update(enabled=False)
    assert refresh_mcp_connections() == {"ok": 0, "unavailable": 0}


def test_a_servers_output_schema_is_checked_by_our_validator_in_linear_time():
    """The SDK would match an output schema's `pattern` with Python's `re`: `^(a+)+$`
    against 40 a's and a `!` takes hours there; RE2 answers at once."""
    import asyncio
    from types import SimpleNamespace

    from tools.runtime.mcp_session import _Session

    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["code"],
    }
    session = _Session.__new__(_Session)  # (no connection: only its check is exercised)
    session._server_url = "http://mcp.example/mcp"

    async def list_tools():
        return SimpleNamespace(tools=[SimpleNamespace(name="code", output_schema=schema)])

    session.list_tools = list_tools

    def check(content):
        result = SimpleNamespace(structured_content=content)
        return asyncio.run(session.validate_tool_result("code", result))

    started = time.perf_counter()
    with pytest.raises(McpUnavailable, match="tool code's result breaks its output schema"):
        check({"code": "a" * 40 + "!"})
    assert time.perf_counter() - started < 1
    assert check({"code": "aaa"}) is None
    # A tool the server did not list, like one without an output schema: unchecked.
    assert asyncio.run(session.validate_tool_result("other", SimpleNamespace())) is None
