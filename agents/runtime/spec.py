"""What an agent is to the runtime, and what a run's outcome looks like."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from providers.runtime.types import Usage
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.tool import ToolCall

ApprovalPolicy = Literal["flagged", "writes", "never"]
# flagged: tools whose capability requires approval; writes: those plus every write or
# destructive tool; never: no approvals (trusted automation).


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    MAX_ROUNDS = "max_rounds"
    # The model called a tool the API caller runs itself: the run ended with those calls,
    # and the caller's next request (carrying their results) is a new run.
    AWAITING_CLIENT = "awaiting_client"


TERMINAL = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.MAX_ROUNDS,
        RunStatus.AWAITING_CLIENT,
    }
)


@dataclass(frozen=True)
class CodeLimits:
    """What one code-mode program may use (agents/runtime/code_mode.py; settings
    CODE_MODE_*). time_s counts the interpreter's own execution, not the time its tool calls
    take (each has its tool's timeout)."""

    time_s: float = 10.0
    memory_bytes: int = 64 * 1024 * 1024
    output_chars: int = 20_000
    tool_calls: int = 50
    recursion_depth: int = 200


@dataclass(frozen=True)
class AgentSpec:
    name: str
    instructions: str
    model: str
    temperature: float | None = None
    max_rounds: int = 10
    max_tool_calls: int = 50
    max_tokens_per_run: int | None = None
    max_tokens_per_response: int = 1024
    tool_names: tuple[str, ...] | None = None  # None: every tool of the registry
    tool_tags: tuple[str, ...] = ()
    tool_exclude: tuple[str, ...] = ()
    approval_policy: ApprovalPolicy = "flagged"
    memory: bool = False
    output_schema: dict[str, Any] | None = None
    structured_retries: int = 2
    # Once tool results are in the run, the answer comes from a model call offered no tools
    # (final_answer alone, for structured output): text inside a result (a prompt injection)
    # cannot make the model call another tool. One round of tools, then the answer.
    results_without_tools: bool = False
    kind: str = "orchestrator"  # see agents/runtime/kinds.py
    remote_url: str = ""  # for the "remote" kind: its server, or
    remote_command_name: str = ""  # the allow-listed command it runs as (agents/specs.py),
    remote_command: tuple[str, ...] = ()  # and that command's argv (empty: not allow-listed)
    remote_command_user: str = "nobody"  # the account it runs as when the platform is root
    # What an API caller may add to one run (agents/runtime/client_request.py):
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    tool_choice: str = "auto"  # the first round's; "none" holds for every round
    client_tools: tuple[Any, ...] = ()  # Tools the caller runs: a call to one ends the run
    # Code mode (agents/runtime/code_mode.py): the model is offered run_code, a program
    # calling the agent's tools, instead of the tools themselves.
    code_mode: bool = False
    code_limits: CodeLimits = field(default_factory=CodeLimits)


@dataclass(frozen=True)
class Decision:
    """A human's decision on one pending tool call."""

    approved: bool
    by: str
    reason: str = ""
    arguments: dict[str, Any] | None = None  # edited arguments, when the approver changed them
    # The exact request approved, for a tool with a preparer (tools/runtime/prepared_request.py);
    # `arguments` are then those it was prepared from.
    prepared: PreparedRequest | None = None


@dataclass
class RunOutcome:
    status: RunStatus
    output: str = ""
    structured_output: Any = None
    usage: Usage = field(default_factory=Usage)
    error: str = ""
    awaiting: list[ToolCall] = field(default_factory=list)  # calls waiting for a decision
    suspended: list[ToolCall] = field(default_factory=list)  # calls waiting on a child run
    client_calls: list[ToolCall] = field(default_factory=list)  # for the API caller to run
    evidence: list[dict[str, Any]] = field(default_factory=list)  # agents/runtime/claims.py
    # Model calls its usage holds, each priced at its own model (ModelTokens dicts: a
    # workflow run's steps, which call more than one model; agents/runs/costs.py).
    priced: list[dict[str, Any]] = field(default_factory=list)
