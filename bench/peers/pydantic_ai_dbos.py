"""pydantic-ai with DBOS (`pydantic_ai.durable_exec.dbos`): the `DBOSDurability` capability,
which makes every model request a step, and `agent.run` inside a DBOS workflow (pydantic-ai
2.68 deprecates the older `DBOSAgent` wrapper for it); the calculator is a step too
(`@DBOS.step()`: the capability runs function tools inline). The system database on the
embedded PostgreSQL. Driven by bench/peers/__init__.py."""

from __future__ import annotations

from typing import Any

import harness
from dbos import DBOS
from pydantic_ai import Agent, Tool
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings


class DBOSPeer:
    def __init__(self, config: harness.Config) -> None:
        self.config = config
        self.client = harness.openai_client(config)

        @DBOS.step()
        async def calculator(expression: str) -> str:
            return harness.calculate(config, expression)

        def tool(definition: dict[str, Any]) -> Tool:
            name = definition["function"]["name"]

            async def call(**arguments: Any) -> str:
                if name != "calculator":
                    return harness.not_scripted(name)
                return await calculator(arguments["expression"])

            return Tool.from_schema(
                call, name=name, description=definition["function"].get("description", ""),
                json_schema=definition["function"]["parameters"],
            )  # fmt: skip

        # The capability registers its steps with DBOS when the agent is made: before launch.
        agent = Agent(
            OpenAIChatModel(config.model, provider=OpenAIProvider(openai_client=self.client)),
            name="bench",
            instructions=config.system,
            model_settings=ModelSettings(max_tokens=config.max_tokens),
            tools=[tool(definition) for definition in config.tools],
            capabilities=[DBOSDurability()],
        )

        @DBOS.workflow()
        async def run_agent(prompt: str) -> tuple[str, int]:
            result = await agent.run(prompt)
            return str(result.output), result.usage().requests

        self.workflow = run_agent

    async def start(self) -> None:
        await harness.create_database(self.config)
        DBOS(
            config={
                "name": "bench-pydantic-ai",
                "system_database_url": self.config.database_url(),
                "run_admin_server": False,
            }
        )
        DBOS.launch()

    async def run(self) -> tuple[str, int]:
        return await self.workflow(self.config.input)

    async def close(self) -> None:
        await self.client.close()
        DBOS.destroy()


if __name__ == "__main__":
    harness.serve(DBOSPeer, ("pydantic-ai-slim", "dbos"))
