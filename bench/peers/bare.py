"""Reference: the bare loop of bench/agents.py (one SDK client, Chat Completions, the
calculator called directly, no persistence), in the peers' venv and process, so that the
table shows what running a side there changes by itself. Driven by bench/peers/__init__.py."""

from __future__ import annotations

import json
from typing import Any

import harness


class BareLoop:
    def __init__(self, config: harness.Config) -> None:
        self.config = config

    async def start(self) -> None:
        self.client = harness.openai_client(self.config)

    async def run(self) -> tuple[str, int]:
        config = self.config
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": config.system},
            {"role": "user", "content": config.input},
        ]
        for rounds in range(1, 11):
            completion = await self.client.chat.completions.create(
                model=config.model, messages=messages, max_completion_tokens=config.max_tokens,
                tools=config.tools, tool_choice="auto",
            )  # fmt: skip
            message = completion.choices[0].message
            calls = list(message.tool_calls or ())
            if not calls:
                return message.content or "", rounds
            messages.append(message.model_dump(exclude_none=True))
            for call in calls:
                expression = json.loads(call.function.arguments)["expression"]
                result = harness.calculate(config, expression)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        raise RuntimeError("the bare loop did not finish")

    async def close(self) -> None:
        await self.client.close()


if __name__ == "__main__":
    harness.serve(BareLoop, ("openai",))
