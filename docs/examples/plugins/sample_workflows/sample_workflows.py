"""A sample plug-in of the agent platform: a workflow made a tool, given to every tenant
of a platform it is installed into (`pip install docs/examples/plugins/sample_workflows`;
its pyproject.toml declares `TOOLS` in the `agentplatform.tools` group, docs/plugins.md).
Its steps call built-ins only, so it needs no model and no configuration.

`compound_interest` shows each kind of deterministic step: a transform prepares the
numbers, a branch picks continuous or periodic compounding, a calculator tool step
computes the balance exactly, and a transform formats the answer.
"""

from __future__ import annotations

from typing import Any

from agents.runtime.workflow import pipe, tool_step, workflow_tool
from tools.runtime.builtins import BUILTINS
from tools.runtime.expectations import Expectation, ToolExample
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed

PERIODS_PER_YEAR = {"yearly": 1, "quarterly": 4, "monthly": 12, "daily": 365}
COMPOUNDING = [*PERIODS_PER_YEAR, "continuous"]


def prepare_inputs(arguments: dict[str, Any]) -> dict[str, Any]:
    """The validated arguments, with defaults applied and the rate as a fraction."""
    compounding = arguments.get("compounding", "monthly")
    if compounding not in COMPOUNDING:
        raise ToolFailed(f"compounding must be one of {', '.join(COMPOUNDING)}")
    return {
        "principal": arguments["principal"],
        "rate": arguments["annual_rate_percent"] / 100,
        "years": arguments["years"],
        "compounding": compounding,
    }


def continuous_balance(value: dict[str, Any]) -> dict[str, str]:
    return {"expression": f"{value['principal']!r} * e ** ({value['rate']!r} * {value['years']!r})"}


def periodic_balance(value: dict[str, Any]) -> dict[str, str]:
    n = PERIODS_PER_YEAR[value["compounding"]]
    rate, years = value["rate"], value["years"]
    return {"expression": f"{value['principal']!r} * (1 + {rate!r} / {n}) ** ({n} * {years!r})"}


def format_answer(value: dict[str, Any]) -> dict[str, Any]:
    balance = value["calculation"]["result"]
    return {
        "balance": round(balance, 2),
        "interest_earned": round(balance - value["principal"], 2),
        "principal": value["principal"],
        "annual_rate_percent": round(value["rate"] * 100, 10),
        "years": value["years"],
        "compounding": value["compounding"],
    }


compound_interest = (
    pipe(prepare_inputs, label="compound_interest")
    .branch(
        lambda value: value["compounding"] == "continuous",
        tool_step("calculator", continuous_balance, into="calculation", label="continuous"),
        tool_step("calculator", periodic_balance, into="calculation", label="periodic"),
        label="choose-compounding",
    )
    .then(format_answer)
)

COMPOUND_INTEREST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "principal": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e15},
        "annual_rate_percent": {"type": "number", "minimum": -100, "maximum": 1000},
        "years": {"type": "number", "minimum": 0, "maximum": 1000},
        "compounding": {"type": "string", "enum": COMPOUNDING, "default": "monthly"},
    },
    "required": ["principal", "annual_rate_percent", "years"],
    "additionalProperties": False,
}


def workflow_tools() -> list[Tool]:
    """The sample's workflows as tools. Their steps use BUILTINS (not the tenant's
    registry), so a tenant's own tool definitions cannot change what they compute."""
    return [
        workflow_tool(
            compound_interest,
            name="compound_interest",
            description=(
                "Compute the balance and the interest earned when a principal grows at an "
                "annual interest rate (in percent) for a number of years, compounded "
                "yearly, quarterly, monthly (the default), daily or continuously. Computed step "
                "by step with the calculator; use it instead of computing interest yourself."
            ),
            input_schema=COMPOUND_INTEREST_SCHEMA,
            registry=BUILTINS,
            capability=Capability(effect=Effect.NONE, idempotent=True, timeout_s=10),
            tags={"math"},
            examples=(
                ToolExample(
                    {"principal": 1000, "annual_rate_percent": 5, "years": 10},
                    Expectation("contains", '"balance": 1647.01'),
                ),
                {
                    "principal": 2500,
                    "annual_rate_percent": 3.5,
                    "years": 4.5,
                    "compounding": "daily",
                },
            ),
        )
    ]


TOOLS: list[Tool] = workflow_tools()
