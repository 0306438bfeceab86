from __future__ import annotations

import asyncio
from datetime import datetime

from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.tool import Effect, ToolCall

CTX = RunContext(tenant_id=1)


def call(name: str, **arguments):
    return asyncio.run(BUILTINS.execute(ToolCall("c", name, arguments), CTX))


def test_builtins_are_registered_like_any_tool():
    # Every `agentplatform.tools` plug-in, the platform's own by entry point name
    # (pyproject.toml): a workflow made a tool among them.
    assert BUILTINS.names() == ["calculator", "current_time", "llm", "think"]
    for item in BUILTINS:  # `llm` reads: it sends the question out (tests/providers)
        assert item.capability.effect is (Effect.READ if item.name == "llm" else Effect.NONE)
        assert item.description and item.examples


def test_calculator():
    assert call("calculator", expression="(1 + 2) * sqrt(16)").result == {"result": 12.0}
    assert call("calculator", expression="2**10").result == {"result": 1024}
    refused = call("calculator", expression="9**9**9")
    assert refused.result is None and refused.error
    hostile = call("calculator", expression="__import__('os').system('id')")
    assert hostile.result is None and "not allowed" in hostile.error


def test_think_returns_its_input():
    assert call("think", thought="step 1").result == {"thought": "step 1"}


def test_current_time_in_a_time_zone():
    result = call("current_time", timezone="Asia/Kolkata").result
    assert result["utc_offset"] == "+05:30" and result["timezone"] == "Asia/Kolkata"
    parsed = datetime.fromisoformat(result["iso"])
    assert abs((parsed - datetime.now(parsed.tzinfo)).total_seconds()) < 5
    assert call("current_time").result["utc_offset"] == "+00:00"
    error = call("current_time", timezone="Mars/Olympus").error
    assert (
        error == "unknown time zone 'Mars/Olympus'; use an IANA name like 'Europe/Paris' or 'UTC'"
    )
    assert call("current_time", timezone="../../etc/passwd").error.startswith("unknown time zone")
