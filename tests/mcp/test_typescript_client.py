"""The official MCP TypeScript client (`@modelcontextprotocol/sdk` from npm, installed by
`make node-clients`) against a live server. Unlike the Python client, it checks a result's
`structuredContent` against the tool's output schema, errors and pending results included."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agents.models import Agent, Run
from base.versions import config_bump
from tenancy import services as tenancy
from tests.fakes.provider_server import TextReply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def keys(trio) -> dict[str, Any]:
    _, run = tenancy.api_key_create(tenant=trio.acme, name="mcp", scopes=["read", "run"])
    return {"run": run}


CLIENTS = Path(__file__).resolve().parents[1] / "clients" / "node"
OUTPUT = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def ts_call(url: str, key: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if shutil.which("node") is None or not (CLIENTS / "node_modules").is_dir():
        pytest.fail("the TypeScript client is not installed: run `make node-clients`")
    done = subprocess.run(
        ["node", str(CLIENTS / "mcp_call.mjs"), url, key, tool, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_tool_with_an_output_schema_waiting_for_approval_is_a_readable_error(
    mcp_server, trio, keys, transfer
):
    ToolDefinition.objects.filter(tenant=trio.acme, name="transfer").update(output_schema=OUTPUT)
    config_bump(trio.acme.pk)
    answer = ts_call(mcp_server, keys["run"], "transfer", {"amount": 5, "to": "bob"})
    assert "error" not in answer, answer  # the client threw before the fix
    assert "transfer" in answer["tools"]
    result = answer["result"]
    run = Run.objects.get(tenant=trio.acme, tool_name="transfer")
    assert result["isError"] is True and "structuredContent" not in result
    assert "Approval pending" in result["content"][0]["text"]
    meta = result["_meta"]
    assert (meta["run_id"], meta["status"]) == (run.pk, "awaiting_approval")
    assert meta["prepared_request"]["body"] == '{"amount":5,"to":"bob"}'  # what approving sends
    assert transfer.requests == []


def test_a_failing_tool_with_an_output_schema_is_a_readable_error(mcp_server, trio, keys):
    ToolDefinition.objects.create(
        tenant=trio.acme,
        name="broken",
        description="Always fails.",
        kind="http",
        config={"method": "GET", "url": "http://127.0.0.1:9/nothing-listens-here"},
        input_schema={"type": "object", "properties": {}},
        output_schema=OUTPUT,
    )
    config_bump(trio.acme.pk)
    answer = ts_call(mcp_server, keys["run"], "broken", {})
    assert "error" not in answer, answer
    assert answer["result"]["isError"] is True and "structuredContent" not in answer["result"]
    assert answer["result"]["_meta"]["status"] == "failed"


def test_an_agents_answer_matches_its_output_schema(
    mcp_server, trio, keys, agent, provider_server, celery_worker_process
):
    provider_server.script("openai", TextReply("Hello from the agent."))
    answer = ts_call(mcp_server, keys["run"], "ask_assistant", {"message": "hi"})
    assert "error" not in answer, answer
    structured = answer["result"]["structuredContent"]
    assert structured["answer"] == "Hello from the agent." and structured["status"] == "succeeded"
    assert Agent.objects.get(slug="assistant").pk == agent.pk
