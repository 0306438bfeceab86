"""The MCP endpoint, driven by the official `mcp` SDK client against a uvicorn server (a
subprocess on the test database); agent runs are executed by a real Celery worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from agents.models import Agent, Approval, Conversation, Crew, Run, RunEvent
from agents.runs import run_start, tool_run
from agents.services import conversation_save
from base.versions import config_bump
from tenancy import services as tenancy
from tenancy.models import Membership, Role
from tests.conftest import PAY_SECRET
from tests.factories import make_user
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture
def keys(trio) -> dict[str, Any]:
    run_key, run = tenancy.api_key_create(tenant=trio.acme, name="mcp", scopes=["read", "run"])
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    _, write = tenancy.api_key_create(tenant=trio.acme, name="wo", scopes=["write"])
    _, globex = tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["read", "run"])
    return {"run": run, "run_key": run_key, "read": read, "write": write, "globex": globex}


@pytest.fixture
def weather(trio):
    """acme's HTTP tool: GET a local server's /weather?city=..."""
    server = LocalServer()
    server.route("GET", "/weather", Reply(json={"temperature_c": 21, "sky": "clear"}))
    ToolDefinition.objects.create(
        tenant=trio.acme,
        name="weather",
        description="Current weather in a city.",
        kind="http",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        config={"method": "GET", "url": server.url + "/weather"},
    )
    yield server
    server.close()


def with_session(url: str, key: str, action: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def session() -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            return await action(client)

    return asyncio.run(session())


def tools_of(url: str, key: str) -> dict[str, Any]:
    async def action(client: ClientSession) -> dict[str, Any]:
        return {tool.name: tool for tool in (await client.list_tools()).tools}

    return with_session(url, key, action)


def call(url: str, key: str, name: str, arguments: dict[str, Any]) -> CallToolResult:
    async def action(client: ClientSession) -> CallToolResult:
        return await client.call_tool(name, arguments)

    return with_session(url, key, action)


def text_of(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content)


# -- authentication and transport security ------------------------------------------------
def test_no_key_is_a_401_with_a_challenge_naming_the_metadata(mcp_server):
    response = httpx2.post(mcp_server, json=INITIALIZE, headers=POST_HEADERS)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    metadata_url = mcp_server.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert challenge.startswith("Bearer ") and f'resource_metadata="{metadata_url}"' in challenge
    metadata = httpx2.get(metadata_url)
    assert metadata.status_code == 200 and metadata.json()["resource"] == mcp_server


def test_a_wrong_or_revoked_key_is_a_401(mcp_server, keys):
    wrong = keys["run"][:-4] + "abcd"
    tenancy.api_key_revoke(key=keys["run_key"])
    for key in (wrong, "not-a-key", keys["run"]):
        response = httpx2.post(
            mcp_server, json=INITIALIZE, headers={**POST_HEADERS, "Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 401, key
        assert response.headers["www-authenticate"].startswith("Bearer ")


def test_a_revoked_key_and_a_disabled_tool_take_effect_on_the_next_call(mcp_server, trio, keys):
    """The server remembers keys and registries per version; a change bumps the version and
    the server sees it before its next answer (no waiting, no retry)."""
    assert not call(mcp_server, keys["run"], "calculator", {"expression": "1+1"}).is_error
    ToolDefinition.objects.create(
        tenant=trio.acme, name="calculator", kind="builtin", config={"builtin": "calculator"},
        enabled=False,
    )  # fmt: skip
    gone = call(mcp_server, keys["run"], "calculator", {"expression": "1+1"})
    assert gone.is_error and "No such tool" in text_of(gone)
    tenancy.api_key_revoke(key=keys["run_key"])
    refused = httpx2.post(
        mcp_server, json=INITIALIZE,
        headers={**POST_HEADERS, "Authorization": f"Bearer {keys['run']}"},
    )  # fmt: skip
    assert refused.status_code == 401


def test_a_keys_creator_demoted_or_removed_limits_it_on_the_next_call(mcp_server, trio):
    """The server (another process) remembers the key with its creator's role; a change
    here moves the keys version, and the next call is checked again."""
    dana = make_user("dana")
    tenancy.membership_set(tenant=trio.acme, user=dana, role=Role.MEMBER)
    _, full = tenancy.api_key_create(
        tenant=trio.acme, name="hers", scopes=["read", "run"], created_by=dana
    )
    assert not call(mcp_server, full, "calculator", {"expression": "1+1"}).is_error
    tenancy.membership_set(tenant=trio.acme, user=dana, role=Role.VIEWER)
    refused = call(mcp_server, full, "calculator", {"expression": "1+1"})
    assert refused.is_error and "member role" in text_of(refused)
    assert "calculator" in tools_of(mcp_server, full)  # a viewer still lists
    tenancy.membership_remove(membership=Membership.objects.get(tenant=trio.acme, user=dana))
    gone = httpx2.post(
        mcp_server, json=INITIALIZE, headers={**POST_HEADERS, "Authorization": f"Bearer {full}"}
    )
    assert gone.status_code == 401
    assert Run.objects.filter(tool_name="calculator").count() == 1


def test_a_foreign_host_is_refused_and_a_foreign_origin_forbidden(mcp_server, keys):
    auth = {**POST_HEADERS, "Authorization": f"Bearer {keys['run']}"}
    assert httpx2.post(mcp_server, json=INITIALIZE, headers=auth).status_code == 200
    bad_host = httpx2.post(mcp_server, json=INITIALIZE, headers={**auth, "Host": "evil.example"})
    assert bad_host.status_code == 421
    origin = {**auth, "Origin": "https://evil.example"}
    assert httpx2.post(mcp_server, json=INITIALIZE, headers=origin).status_code == 403


def test_django_still_serves_everything_else(mcp_server):
    base = mcp_server.removesuffix("/mcp")
    assert httpx2.get(f"{base}/v1/models").status_code == 401  # the OpenAI endpoint's own
    assert httpx2.get(f"{base}/mcpx").status_code == 404  # Django's, not the MCP app's


# -- tools/list ------------------------------------------------------------------------------
def test_a_key_lists_its_tenants_tools_agents_and_crews_only(mcp_server, trio, keys, weather):
    Agent.objects.create(
        tenant=trio.acme, slug="assistant", name="Assistant", description="Answers questions."
    )
    Agent.objects.create(tenant=trio.acme, slug="retired", name="Old", active=False)
    Crew.objects.create(tenant=trio.acme, slug="desk", name="Desk", description="A help desk.")
    ToolDefinition.objects.create(
        tenant=trio.globex, name="globex_calc", kind="builtin", config={"builtin": "calculator"}
    )
    Agent.objects.create(tenant=trio.globex, slug="spy", name="Globex's")

    acme = tools_of(mcp_server + "/", keys["read"])  # `read` lists; the trailing slash works
    assert {"calculator", "weather", "ask_assistant", "ask_desk"} <= set(acme)
    assert not {"globex_calc", "ask_spy", "ask_retired"} & set(acme)
    globex = tools_of(mcp_server, keys["globex"])
    assert {"calculator", "globex_calc", "ask_spy"} <= set(globex)
    assert not {"weather", "ask_assistant", "ask_desk"} & set(globex)

    calculator = acme["calculator"]
    assert calculator.input_schema["required"] == ["expression"]
    hints = calculator.annotations
    assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
        True, False, True
    )  # fmt: skip
    assert hints.open_world_hint is False
    assert acme["weather"].annotations.open_world_hint is True
    assert acme["weather"].description == "Current weather in a city."
    ask = acme["ask_assistant"]
    assert "Answers questions." in ask.description
    assert ask.input_schema["required"] == ["message"]
    assert ask.input_schema["properties"]["conversation_id"]["type"] == "integer"
    assert "Desk" in acme["ask_desk"].description


def test_a_key_without_read_cannot_list(mcp_server, keys):
    async def action(client: ClientSession) -> MCPError | None:
        try:
            await client.list_tools()
        except MCPError as exc:  # a JSON-RPC error, raised here rather than in a task group
            return exc
        return None

    refused = with_session(mcp_server, keys["write"], action)
    assert refused is not None and "lacks the 'read' scope" in refused.message


# -- tools/call: registry tools ---------------------------------------------------------------
def test_calling_a_builtin_runs_it_and_records_a_run(mcp_server, trio, keys):
    result = call(mcp_server, keys["run"], "calculator", {"expression": "6*7"})
    assert not result.is_error
    assert result.structured_content == {"result": 42}
    assert json.loads(text_of(result)) == {"result": 42}
    run = Run.objects.get(tenant=trio.acme, tool_name="calculator")
    assert (run.status, run.initiated_by_api_key_id) == ("succeeded", keys["run_key"].pk)
    assert run.events.get(seq=1).payload["via"] == "mcp"


def test_calling_an_http_tool_reaches_its_server(mcp_server, trio, keys, weather):
    result = call(mcp_server, keys["run"], "weather", {"city": "Paris"})
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"temperature_c": 21, "sky": "clear"}
    assert [r.path for r in weather.requests] == ["/weather?city=Paris"]
    run = Run.objects.get(tenant=trio.acme, tool_name="weather")
    assert (run.status, run.initiated_by_api_key_id) == ("succeeded", keys["run_key"].pk)


def test_invalid_arguments_and_unknown_tools_are_error_results(mcp_server, trio, keys):
    ToolDefinition.objects.create(
        tenant=trio.globex, name="globex_calc", kind="builtin", config={"builtin": "calculator"}
    )
    bad = call(mcp_server, keys["run"], "calculator", {"nope": 1})
    assert bad.is_error and "expression" in text_of(bad)
    failed = Run.objects.get(tenant=trio.acme, tool_name="calculator")
    assert (failed.status, failed.initiated_by_api_key_id) == ("failed", keys["run_key"].pk)
    for name in ("nope", "globex_calc", "ask_nobody"):
        unknown = call(mcp_server, keys["run"], name, {"message": "hi"})
        assert unknown.is_error and "No such tool" in text_of(unknown), name
    Agent.objects.create(tenant=trio.acme, slug="assistant", name="Assistant")
    no_message = call(mcp_server, keys["run"], "ask_assistant", {"conversation_id": 1})
    assert no_message.is_error and "message" in text_of(no_message)
    assert not Run.objects.filter(agent__isnull=False).exists()


def test_a_tool_over_its_rate_limit_is_an_error_result_counted_with_other_processes(
    mcp_server, trio, keys
):
    ToolDefinition.objects.create(
        tenant=trio.acme, name="calc", kind="builtin", config={"builtin": "calculator"},
        rate_limit_per_minute=2,
    )  # fmt: skip
    results = [call(mcp_server, keys["run"], "calc", {"expression": "6*7"}) for _ in range(3)]
    assert [r.is_error for r in results] == [False, False, True]
    assert text_of(results[2]).startswith("tool calc is limited to 2 calls per minute")
    refused = Run.objects.get(tenant=trio.acme, tool_name="calc", status="failed")
    assert refused.events.get(type="tool.rate_limited").payload["limit"] == 2
    # The server is another process: this one meets the same count.
    here = tool_run(tenant=trio.acme, name="calc", arguments={"expression": "1+1"})
    assert here.error.startswith("tool calc is limited to 2 calls per minute")


def test_a_read_only_key_cannot_call(mcp_server, trio, keys):
    result = call(mcp_server, keys["read"], "calculator", {"expression": "1+1"})
    assert result.is_error and "lacks the 'run' scope" in text_of(result)
    assert not Run.objects.exists()


def test_an_approval_gated_tool_is_not_executed(mcp_server, trio, keys, transfer):
    result = call(mcp_server, keys["run"], "transfer", {"amount": 5, "to": "bob"})
    assert result.is_error
    run = Run.objects.get(tenant=trio.acme, tool_name="transfer")
    approval = Approval.objects.get(run=run)
    text = text_of(result)
    assert "Approval pending" in text and f"Run {run.pk}" in text
    assert f"/api/v1/runs/{run.pk}/approvals/{approval.pk}" in text
    assert transfer.requests == []  # nothing reached the bank
    assert (run.status, run.initiated_by_api_key_id) == ("awaiting_approval", keys["run_key"].pk)


def test_a_parked_call_of_an_http_tool_shows_its_exact_request_masked(mcp_server, trio, keys, pay):
    result = call(mcp_server, keys["run"], "pay", {"amount": 5, "to": "bob"})
    assert result.is_error and pay.requests == []
    approval = Approval.objects.get(run_id=result.meta["run_id"])
    text = text_of(result)
    assert f"POST {pay.url}/payments/bob\n" in text
    assert "Authorization: Bearer ***" in text and text.endswith('\n\n{"amount":5}')
    assert result.meta["prepared_request"] == approval.prepared_request
    assert PAY_SECRET not in text + json.dumps(result.meta)


# -- tools/call: agents ------------------------------------------------------------------------
def test_asking_an_agent_runs_it_in_a_conversation_the_key_owns(
    mcp_server, trio, agent, keys, provider_server, celery_worker_process
):
    agent.max_rounds, agent.max_tokens_per_run = 5, 8000
    agent.save()
    provider_server.script("openai", TextReply("Hello from the agent."), TextReply("Again."))
    result = call(mcp_server, keys["run"], "ask_assistant", {"message": "Hi there"})
    assert not result.is_error, text_of(result)
    assert text_of(result) == "Hello from the agent."
    structured = result.structured_content
    run = Run.objects.get(pk=structured["run_id"])
    assert structured["status"] == "succeeded" and run.status == "succeeded"
    assert run.limits == {  # what the worker ran it under
        "max_rounds": 5,
        "max_tool_calls": 50,
        "max_tokens_per_run": 8000,
        "max_tokens_per_response": 1024,
    }
    assert (run.agent_id, run.input, run.initiated_by_api_key_id) == (
        agent.pk, "Hi there", keys["run_key"].pk
    )  # fmt: skip
    conversation = Conversation.objects.get(pk=structured["conversation_id"])
    assert conversation.owner_api_key_id == keys["run_key"].pk and conversation.agent == agent

    again = call(
        mcp_server, keys["run"], "ask_assistant",
        {"message": "And again?", "conversation_id": conversation.pk},
    )  # fmt: skip
    assert text_of(again) == "Again."
    assert again.structured_content["conversation_id"] == conversation.pk
    assert conversation.runs.count() == 2
    other = call(
        mcp_server, keys["globex"], "calculator", {"expression": "1"}
    )  # another tenant's key works on its own tools only
    assert not other.is_error


def test_asking_in_a_conversation_whose_answer_still_runs_is_an_error_result(
    mcp_server, trio, agent, keys
):
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": agent}, owner_api_key=keys["run_key"]
    )
    running = run_start(  # queued: nothing executes it
        tenant=trio.acme, agent=agent, input="one", conversation=chat,
        initiated_by=keys["run_key"], enqueue=False,
    )  # fmt: skip
    result = call(
        mcp_server, keys["run"], "ask_assistant", {"message": "two", "conversation_id": chat.pk}
    )
    assert result.is_error
    assert f"run {running.pk}" in text_of(result) and "still answering" in text_of(result)
    assert result.structured_content is None  # (it would not match the output schema)
    assert result.meta["status"] == "conversation_busy"
    assert chat.runs.count() == 1


def test_an_agent_run_that_parks_answers_where_to_approve(
    mcp_server, trio, agent, keys, transfer, provider_server, celery_worker_process
):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("c1", "transfer", '{"amount": 5, "to": "bob"}')])
    )
    result = call(mcp_server, keys["run"], "ask_assistant", {"message": "Pay bob 5"})
    assert result.is_error
    assert result.structured_content is None  # (it would not match the output schema)
    run = Run.objects.get(pk=result.meta["run_id"])
    approval = Approval.objects.get(run=run)
    assert run.status == "awaiting_approval"
    assert result.meta["status"] == "awaiting_approval"
    assert f"/api/v1/runs/{run.pk}/approvals/{approval.pk}" in text_of(result)
    assert f"  POST {transfer.url}/transfers\n" in text_of(result)  # the exact request
    assert transfer.requests == []


def test_a_key_limited_to_tools_and_agents_sees_and_calls_only_those(mcp_server, trio):
    Agent.objects.create(tenant=trio.acme, slug="assistant", name="Assistant")
    Agent.objects.create(tenant=trio.acme, slug="payroll", name="Payroll")
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"],
        allowed_tools=["current_time"], allowed_agents=["assistant"],
    )  # fmt: skip
    assert set(tools_of(mcp_server, limited)) == {"current_time", "ask_assistant"}
    refused = call(mcp_server, limited, "calculator", {"expression": "1+1"})
    assert refused.is_error and "No such tool" in text_of(refused)
    asked = call(mcp_server, limited, "ask_payroll", {"message": "raise"})
    assert asked.is_error and "may not use this agent" in text_of(asked)
    assert not Run.objects.exists()


def test_resume_run_is_listed_and_resumes_the_keys_failed_run(mcp_server, trio, keys):
    Agent.objects.create(tenant=trio.acme, slug="assistant", name="Assistant")
    run = run_start(tenant=trio.acme, agent=Agent.objects.get(slug="assistant"), input="hi",
                    initiated_by=keys["run_key"], enqueue=False)  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="failed", error="ProviderUnavailable: down")
    assert "resume_run" in tools_of(mcp_server, keys["run"])
    assert "resume_run" not in tools_of(mcp_server, keys["read"])
    resumed = call(mcp_server, keys["run"], "resume_run", {"run_id": run.pk})
    assert not resumed.is_error, text_of(resumed)
    assert resumed.structured_content == {"run_id": run.pk, "status": "queued"}
    assert RunEvent.objects.filter(run=run, type="run.resumed").count() == 1
    finished = run_start(tenant=trio.acme, agent=Agent.objects.get(slug="assistant"),
                         input="hi", initiated_by=keys["run_key"], enqueue=False)  # fmt: skip
    Run.objects.filter(pk=finished.pk).update(status="succeeded")
    refused = call(mcp_server, keys["run"], "resume_run", {"run_id": finished.pk})
    assert refused.is_error and "only a failed run can be resumed" in text_of(refused)


# -- tenant-written schemas ------------------------------------------------------------------
def test_a_schema_planted_to_read_a_file_or_a_url_reads_nothing(mcp_server, trio, keys, tmp_path):
    """The audit's attack: a $ref to a local file (or a URL) stored past validation; the
    resolver's error used to come back quoting the file."""
    secrets = tmp_path / "local-secrets.json"
    secrets.write_text('{"SECRET_KEY": "file-SECRET-123"}')
    with LocalServer() as server:
        server.route("GET", "/schema.json", Reply(json={"type": "string"}))
        definition = ToolDefinition.objects.create(
            tenant=trio.acme,
            name="lookup",
            description="Look a thing up.",
            kind="http",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            config={"method": "GET", "url": server.url + "/lookup"},
        )
        for ref in [f"file://{secrets}#/nope", f"{server.url}/schema.json"]:
            planted = {"type": "object", "properties": {"q": {"$ref": ref}}}
            ToolDefinition.objects.filter(pk=definition.pk).update(input_schema=planted)
            config_bump(trio.acme.pk)  # update() sends no signal
            result = call(mcp_server, keys["run"], "lookup", {"q": "x"})
            assert result.is_error and "No such tool" in text_of(result)
            assert "file-SECRET-123" not in text_of(result) + json.dumps(result.structured_content)
            assert "lookup" not in tools_of(mcp_server, keys["run"])  # skipped, listed fine
        assert server.requests == []


def test_a_catastrophic_pattern_answers_at_once(mcp_server, trio, keys):
    ToolDefinition.objects.create(
        tenant=trio.acme,
        name="lookup",
        description="Look a thing up.",
        kind="http",
        input_schema={
            "type": "object",
            "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}},
        },
        config={"method": "GET", "url": "http://127.0.0.1:9/lookup"},
    )
    result = call(mcp_server, keys["run"], "lookup", {"q": "a" * 50_000 + "!"})  # re: forever
    assert result.is_error and text_of(result) == "invalid arguments: q: must match '^(a+)+$'"
