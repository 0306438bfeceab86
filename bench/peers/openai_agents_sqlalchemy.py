"""openai-agents with a SQLAlchemy session (`agents.extensions.memory.SQLAlchemySession`) on
PostgreSQL through asyncpg: each run a new session (conversation), in which the Runner
stores the input, then each turn's items as the run goes (6 rows a run). One engine (and its
pool) and one SDK client for all runs. Driven by bench/peers/__init__.py."""

from __future__ import annotations

import uuid

import harness
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine

from agents import Runner


class SessionPeer:
    def __init__(self, config: harness.Config) -> None:
        self.config = config

    async def start(self) -> None:
        await harness.create_database(self.config)
        self.engine = create_async_engine(self.config.database_url("postgresql+asyncpg"))
        self.client = harness.openai_client(self.config)

        async def calculator(expression: str) -> str:
            return harness.calculate(self.config, expression)

        self.agent = harness.openai_agents_agent(self.config, self.client, calculator)
        await SQLAlchemySession("tables", engine=self.engine, create_tables=True).get_items()

    async def run(self) -> tuple[str, int]:
        session = SQLAlchemySession(uuid.uuid4().hex, engine=self.engine)
        result = await Runner.run(self.agent, self.config.input, session=session)
        return str(result.final_output), len(result.raw_responses)

    async def close(self) -> None:
        await self.client.close()
        await self.engine.dispose()


if __name__ == "__main__":
    harness.serve(SessionPeer, ("openai-agents", "sqlalchemy", "asyncpg"))
