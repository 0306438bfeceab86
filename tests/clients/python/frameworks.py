"""Agent frameworks as integrators use them, pointed at the platform's /v1.

    .venv-clients/bin/python -I frameworks.py <base /v1 URL> <key> <scenario>

Prints one JSON line: what the framework returned, and the calls it made to the tools it
holds itself. Run isolated (-I): openai-agents' package is named `agents`, like the
platform's app, so the checkout must not be on the path.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from pydantic import BaseModel

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # never export to OpenAI
os.environ.setdefault("LANGSMITH_TRACING", "false")

BASE, KEY, SCENARIO = sys.argv[1:4]
CALLS: list[dict] = []


class City(BaseModel):
    name: str
    population: int


def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append({"tool": "get_weather", "city": city})
    return f"sunny in {city}"


# -- openai-agents ---------------------------------------------------------------------------
GATEWAY_MODEL = "local-openai/gpt-test"  # the tests' connection's model, no agent


def _agents_model(api: str, model: str):
    from openai import AsyncOpenAI

    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel, set_tracing_disabled

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=BASE, api_key=KEY, max_retries=0)
    kind = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    return kind(model=model, openai_client=client)


async def openai_agents(
    api: str, *, output: bool, model: str = "assistant", stream: bool = False
) -> dict:
    from agents import Agent, Runner, function_tool

    agent = Agent(
        name="assistant",
        instructions="Use your tools.",
        model=_agents_model(api, model),
        tools=[function_tool(get_weather)],
        output_type=City if output else None,
    )
    if stream:
        result = Runner.run_streamed(agent, "Weather in Paris?")
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "Weather in Paris?")
    final = result.final_output
    return {"output": final.model_dump() if isinstance(final, BaseModel) else final}


# -- pydantic-ai -----------------------------------------------------------------------------
async def pydantic_ai(*, native: bool) -> dict:
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("assistant", provider=OpenAIProvider(base_url=BASE, api_key=KEY))
    agent = Agent(model, output_type=NativeOutput(City) if native else City, retries=0)
    agent.tool_plain(get_weather)
    result = await agent.run("Weather in Paris?")
    return {"output": result.output.model_dump()}


# -- langchain -------------------------------------------------------------------------------
def langchain(kind: str) -> dict:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model="assistant", base_url=BASE, api_key=KEY, max_retries=0)
    if kind == "tools":
        message = chat.bind_tools([get_weather]).invoke("Weather in Paris?")
        return {"tool_calls": [{"name": c["name"], "args": c["args"]} for c in message.tool_calls]}
    method = "json_schema" if kind == "json_schema" else "function_calling"
    city = chat.with_structured_output(City, method=method).invoke("Biggest city of France?")
    return {"output": city.model_dump() if city is not None else None}


# -- fastmcp (BASE is the /mcp URL here) ------------------------------------------------------
async def fastmcp_client(mode: str) -> dict:
    from fastmcp import Client

    step = "connect"
    try:
        async with Client(BASE, auth=KEY, mode=mode) as client:
            step = "list_tools"
            tools = [tool.name for tool in await client.list_tools()]
            step = "call_tool"
            result = await client.call_tool("calculator", {"expression": "6*7"})
            pinged = None
            if mode == "legacy":  # (protocol 2026-07-28, which `auto` picks, has no ping)
                step = "ping"
                pinged = await client.ping()
            return {"tools": tools, "result": result.structured_content, "pinged": pinged}
    except Exception as exc:
        return {"error": f"{step}: {type(exc).__name__}: {exc}"}


SCENARIOS = {
    "openai_agents_chat_tools": lambda: openai_agents("chat", output=False),
    "openai_agents_chat_output": lambda: openai_agents("chat", output=True),
    "openai_agents_responses_tools": lambda: openai_agents("responses", output=False),
    "openai_agents_responses_output": lambda: openai_agents("responses", output=True),
    "openai_agents_gateway_responses_tools": lambda: openai_agents(
        "responses", output=False, model=GATEWAY_MODEL
    ),
    "openai_agents_gateway_responses_output": lambda: openai_agents(
        "responses", output=True, model=GATEWAY_MODEL
    ),
    "openai_agents_gateway_responses_stream": lambda: openai_agents(
        "responses", output=False, model=GATEWAY_MODEL, stream=True
    ),
    "pydantic_ai_tool_output": lambda: pydantic_ai(native=False),
    "pydantic_ai_native_output": lambda: pydantic_ai(native=True),
    "langchain_tools": lambda: langchain("tools"),
    "langchain_json_schema": lambda: langchain("json_schema"),
    "langchain_function_calling": lambda: langchain("function_calling"),
    "fastmcp_auto": lambda: fastmcp_client("auto"),
    "fastmcp_legacy": lambda: fastmcp_client("legacy"),
}


def main() -> None:
    try:
        result = SCENARIOS[SCENARIO]()
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
    except Exception as exc:  # what the framework raised is the finding
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps({**result, "calls": CALLS}))


main()
