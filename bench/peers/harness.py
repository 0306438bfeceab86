"""What every peer script shares, on the child's side of the pipe (bench/peers/__init__.py is
the parent's): the run's configuration, the calculator, the peer's own database, and the
command loop. Runs in .venv-peers with the stdlib and the peers' packages only: the project's
root must not be on sys.path here, where its `agents` app would shadow openai-agents.

Protocol, one JSON document a line: the parent writes the configuration (`Config`), the
child answers {"ready": {package: version}} once its peer is started; then for each "run"
the child runs once and answers {"ms": wall ms of the run}, and "stop" ends it. Any failure
answers {"error": traceback} and ends the child. The protocol has the process's stdout to
itself: whatever a library prints goes to stderr (the parent's log of the child).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_TOOL_RESULTS = [4, 9]  # the script: calculator 2+2, then 3*3


@dataclass
class Config:
    base_url: str  # the fake provider's OpenAI base URL
    model: str
    system: str  # the platform's composed system prompt, as the bare loop sends it
    tools: list[dict[str, Any]]  # the tools the platform offers, OpenAI definitions
    input: str
    answer: str
    rounds: int
    max_tokens: int
    db_user: str
    db_socket_dir: str
    db_name: str  # the peer's own database, created if missing
    tool_results: list[Any] = field(default_factory=list)  # this run's calculator results

    def database_url(self, driver: str = "postgresql") -> str:
        return f"{driver}://{self.db_user}@/{self.db_name}?host={quote(self.db_socket_dir)}"


class Peer(Protocol):
    async def start(self) -> None: ...

    async def run(self) -> tuple[str, int]:
        """One run of the script: (final answer, model calls)."""
        ...

    async def close(self) -> None: ...


def _load_evaluate() -> Callable[[str], Any]:
    """The platform's calculator (tools/runtime/calculator.py, stdlib only), loaded by path."""
    path = ROOT / "tools" / "runtime" / "calculator.py"
    spec = importlib.util.spec_from_file_location("platform_calculator", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.evaluate


evaluate = _load_evaluate()


def calculate(config: Config, expression: str) -> str:
    """The calculator tool's result as the bare loop sends it (JSON text), recorded for the
    run's check."""
    value = evaluate(expression)
    config.tool_results.append(value)
    return json.dumps({"result": value})


def not_scripted(name: str) -> str:
    raise RuntimeError(f"the model called {name}, which the script never calls")


async def create_database(config: Config) -> None:
    import asyncpg

    connection = await asyncpg.connect(
        host=config.db_socket_dir, user=config.db_user, database="postgres"
    )
    try:
        if not await connection.fetchval(
            "SELECT 1 FROM pg_database WHERE datname = $1", config.db_name
        ):
            await connection.execute(f'CREATE DATABASE "{config.db_name}"')
    finally:
        await connection.close()


def openai_client(config: Config) -> Any:
    """One SDK client for all runs, as the bare loop has."""
    import httpx2
    import openai

    return openai.AsyncOpenAI(
        api_key="k", base_url=config.base_url, http_client=httpx2.AsyncClient(), max_retries=0
    )


def openai_agents_agent(
    config: Config, client: Any, calculator: Callable[[str], Awaitable[str]]
) -> Any:
    """An openai-agents Agent on Chat Completions (as the bare loop speaks) offering the
    platform's tools; `calculator(expression)` computes the one the script calls."""
    from agents import (
        Agent,
        FunctionTool,
        ModelSettings,
        OpenAIChatCompletionsModel,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # its default exports traces to OpenAI: no network here

    def tool(definition: dict[str, Any]) -> FunctionTool:
        name = definition["function"]["name"]

        async def invoke(context: Any, arguments: str) -> str:
            if name != "calculator":
                return not_scripted(name)
            return await calculator(json.loads(arguments)["expression"])

        return FunctionTool(
            name=name,
            description=definition["function"].get("description", ""),
            params_json_schema=definition["function"]["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    return Agent(
        name="bench",
        instructions=config.system,
        model=OpenAIChatCompletionsModel(model=config.model, openai_client=client),
        model_settings=ModelSettings(max_tokens=config.max_tokens),
        tools=[tool(definition) for definition in config.tools],
    )


def serve(build: Callable[[Config], Peer], packages: tuple[str, ...]) -> None:
    """The child's main: build the peer from the parent's configuration, then run it on
    command. The time of a run is taken here, around the run alone (the pipe is outside)."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(document: dict[str, Any]) -> None:
        protocol.write(json.dumps(document) + "\n")

    runner = asyncio.Runner()
    peer: Peer | None = None
    try:
        config = Config(**json.loads(sys.stdin.readline()))
        peer = build(config)
        runner.run(peer.start())
        send({"ready": {name: importlib.metadata.version(name) for name in packages}})
        for line in sys.stdin:
            if json.loads(line) == "stop":
                break
            config.tool_results.clear()
            started = time.perf_counter()
            answer, rounds = runner.run(peer.run())
            elapsed = time.perf_counter() - started
            if (answer, rounds, config.tool_results) != (
                config.answer, config.rounds, EXPECTED_TOOL_RESULTS,
            ):  # fmt: skip
                raise RuntimeError(
                    f"the run answered {answer!r} after {rounds} model calls, tool results "
                    f"{config.tool_results}"
                )
            send({"ms": elapsed * 1000})
    except Exception:
        send({"error": traceback.format_exc()})
        raise SystemExit(1) from None
    finally:
        if peer is not None:
            runner.run(peer.close())
        runner.close()
