"""openai-agents with DBOS (the `dbos-openai-agents` integration): each run a DBOS workflow
calling `DBOSRunner.run`, which makes every model call a step; the calculator is a step too
(`@DBOS.step()`, as the integration's guide says for tools). The system database on the
embedded PostgreSQL. Driven by bench/peers/__init__.py."""

from __future__ import annotations

import harness
from dbos import DBOS
from dbos_openai_agents import DBOSRunner


class DBOSPeer:
    def __init__(self, config: harness.Config) -> None:
        self.config = config

        @DBOS.step()
        async def calculator(expression: str) -> str:
            return harness.calculate(config, expression)

        @DBOS.workflow()
        async def run_agent(prompt: str) -> tuple[str, int]:
            result = await DBOSRunner.run(self.agent, prompt)
            return str(result.final_output), len(result.raw_responses)

        self.calculator, self.workflow = calculator, run_agent

    async def start(self) -> None:
        await harness.create_database(self.config)
        self.client = harness.openai_client(self.config)
        self.agent = harness.openai_agents_agent(self.config, self.client, self.calculator)
        DBOS(
            config={
                "name": "bench-openai-agents",
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
    harness.serve(DBOSPeer, ("openai-agents", "dbos", "dbos-openai-agents"))
