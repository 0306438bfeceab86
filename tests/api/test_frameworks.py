"""Agent frameworks pointed at /v1 as integrators do (openai-agents, pydantic-ai,
langchain-openai), each in a subprocess of the clients' venv (`make py-clients`), over real
HTTP to a live server whose agent's model is the scripted fake provider.

The frameworks' own tools run in the framework: a call to one ends the platform's answer
with `tool_calls`, the framework runs it and sends the result back in its next request."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import ROOT
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

PYTHON = ROOT / ".venv-clients" / "bin" / "python"
SCRIPT = ROOT / "tests" / "clients" / "python" / "frameworks.py"
PARIS = '{"name": "Paris", "population": 2100000}'
WEATHER_CALL = ToolCall("w1", "get_weather", '{"city": "Paris"}')


def framework(asgi_server: str, key: str, scenario: str, url: str | None = None) -> dict:
    """The scenario's JSON line; `url` instead of the server's /v1 (e.g. its /mcp)."""
    if not PYTHON.exists():
        pytest.fail("the framework clients are not installed: run `make py-clients`")
    done = subprocess.run(
        [str(PYTHON), "-I", str(SCRIPT), url or f"{asgi_server}/v1", key, scenario],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def offered(provider_server) -> list[list[str]]:
    """The tool names each model request was offered."""
    return [
        sorted(t["function"]["name"] for t in r.body.get("tools") or [])
        for r in provider_server.requests_to("/v1/chat/completions")
    ]


@pytest.fixture
def run_framework(asgi_server, keys, celery_worker_process, agent):
    return lambda scenario: framework(asgi_server, keys["run"], scenario)


def test_openai_agents_calls_its_function_tool_through_chat_completions(
    run_framework, provider_server
):
    provider_server.script("openai", ToolCallReply([WEATHER_CALL]), TextReply("Sunny in Paris."))
    result = run_framework("openai_agents_chat_tools")
    assert result.get("error") is None, result
    assert result["output"] == "Sunny in Paris."
    assert result["calls"] == [{"tool": "get_weather", "city": "Paris"}]
    assert all("get_weather" in names for names in offered(provider_server))
    last = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert last[-1]["role"] == "tool" and "sunny in Paris" in last[-1]["content"]


def test_openai_agents_output_type_through_chat_completions(run_framework, provider_server):
    provider_server.script("openai", ToolCallReply([ToolCall("f1", "final_answer", PARIS)]))
    result = run_framework("openai_agents_chat_output")
    assert result.get("error") is None, result
    assert result["output"] == {"name": "Paris", "population": 2100000}


@pytest.mark.parametrize("scenario", ["pydantic_ai_tool_output", "pydantic_ai_native_output"])
def test_pydantic_ai_tools_and_typed_output(run_framework, provider_server, scenario):
    final = (
        ToolCallReply([ToolCall("f1", "final_answer", PARIS)])  # NativeOutput: response_format
        if scenario == "pydantic_ai_native_output"
        else ToolCallReply([ToolCall("f1", "final_result", PARIS)])  # its own output tool
    )
    provider_server.script("openai", ToolCallReply([WEATHER_CALL]), final)
    result = run_framework(scenario)
    assert result.get("error") is None, result
    assert result["output"] == {"name": "Paris", "population": 2100000}
    assert result["calls"] == [{"tool": "get_weather", "city": "Paris"}]


def test_langchain_bind_tools_gets_the_tool_calls(run_framework, provider_server):
    provider_server.script("openai", ToolCallReply([WEATHER_CALL]))
    result = run_framework("langchain_tools")
    assert result.get("error") is None, result
    assert result["tool_calls"] == [{"name": "get_weather", "args": {"city": "Paris"}}]


@pytest.mark.parametrize("scenario", ["langchain_json_schema", "langchain_function_calling"])
def test_langchain_structured_output(run_framework, provider_server, scenario):
    name = "final_answer" if scenario == "langchain_json_schema" else "City"
    provider_server.script("openai", ToolCallReply([ToolCall("f1", name, PARIS)]))
    result = run_framework(scenario)
    assert result.get("error") is None, result
    assert result["output"] == {"name": "Paris", "population": 2100000}
