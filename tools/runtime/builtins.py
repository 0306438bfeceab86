"""Built-in tools every tenant has (unless a tenant definition replaces one).

BUILTINS holds them: every plug-in of the `agentplatform.tools` entry-point group, these
three and the platform's others included (base/plugins.py; filled when the tools
app starts, tools/apps.py). All are async: they are pure CPU work of microseconds, so running
them on the event loop beats a thread hop.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tools.runtime.calculator import CalculatorError, evaluate
from tools.runtime.expectations import Expectation, ToolExample
from tools.runtime.registry import ToolFailed, ToolRegistry
from tools.runtime.tool import Capability, Effect, tool

BUILTINS = ToolRegistry()
_PURE = Capability(effect=Effect.NONE, idempotent=True, timeout_s=5)


@tool(
    tags={"builtin", "math"},
    capability=_PURE,
    examples=(
        ToolExample({"expression": "(1 + 2) * sqrt(16)"}, Expectation("exact", {"result": 12})),
    ),
)
async def calculator(expression: str) -> dict:
    """Evaluate an arithmetic expression exactly: numbers, + - * / // % **, parentheses,
    functions such as sqrt, log, sin, round, min, max, factorial, and constants pi, e, tau.
    Use it for any arithmetic instead of computing in your head."""
    try:
        return {"result": evaluate(expression)}
    except CalculatorError as exc:
        raise ToolFailed(str(exc)) from None


@tool(
    tags={"builtin"},
    capability=_PURE,
    examples=(ToolExample({"thought": "First X."}, Expectation("exact", {"thought": "First X."})),),
)
async def think(thought: str) -> dict:
    """Think step by step in a private scratchpad before acting. Nothing happens outside;
    the thought is returned unchanged."""
    return {"thought": thought}


@tool(
    tags={"builtin", "time"},
    capability=_PURE,
    examples=(ToolExample({"timezone": "Europe/Paris"}, Expectation("regex", r"\+0[12]:00")),),
)
async def current_time(timezone: str = "UTC") -> dict:
    """The current date and time in an IANA time zone (e.g. "Europe/Paris",
    "America/New_York"; default UTC)."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolFailed(
            f"unknown time zone {timezone!r}; use an IANA name like 'Europe/Paris' or 'UTC'"
        ) from None
    now = datetime.now(zone)
    return {
        "iso": now.isoformat(timespec="seconds"),
        "timezone": timezone,
        "utc_offset": now.strftime("%z")[:3] + ":" + now.strftime("%z")[3:],
        "weekday": now.strftime("%A"),
    }
