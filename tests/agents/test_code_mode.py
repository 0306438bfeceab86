"""Code mode (agents/runtime/code_mode.py) in the agent loop, driven by FakeModel: programs
run in Monty's sandbox (a worker subprocess, hence the integration tier); no database.

The runs with the platform around them (approvals parked and decided, a worker dying
mid-program) are in test_code_mode_runs.py."""

from __future__ import annotations

from typing import Any

import pytest

from agents.runtime.code_mode import RUN_CODE, signature
from agents.runtime.spec import AgentSpec, CodeLimits, Decision, RunStatus
from agents.runtime.state import RunState
from providers.runtime.fake import FakeModel
from tests.agents.test_loop import (
    RecordingSink,
    SavingCheckpointer,
    go,
    make_spec,
    recording_tool,
    resume,
)
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall, ToolFailed

pytestmark = pytest.mark.integration  # each program runs in a Monty worker process

LIMITS = CodeLimits(time_s=1, memory_bytes=32 * 1024 * 1024, output_chars=500, tool_calls=5)


def coder(**overrides: Any) -> AgentSpec:
    return make_spec(code_mode=True, code_limits=LIMITS, **overrides)


def record_tool(executed: list[dict[str, Any]]) -> Tool:
    def handler(arguments: dict[str, Any], ctx) -> dict[str, Any]:
        executed.append(arguments)
        if arguments["id"] < 0:
            raise ToolFailed(f"no record {arguments['id']}")
        return {"id": arguments["id"], "amount": arguments["id"] * 10}

    return Tool(
        name="get-record",
        description="Look up a record by id.\nMore detail the program does not need.",
        input_schema={
            "type": "object",
            "properties": {"id": {"type": "integer"}, "verbose": {"type": "boolean"}},
            "required": ["id"],
        },
        handler=handler,
    )


def registry(executed: list[dict[str, Any]], *more: Tool) -> ToolRegistry:
    return ToolRegistry([record_tool(executed), *more])


def program(code: str, call_id: str = "p1") -> ToolCall:
    return ToolCall(call_id, RUN_CODE, {"code": code})


def run_program(code: str, tools: ToolRegistry | None = None, **kwargs: Any):
    """One run whose model sends `code`, then answers "done"; the outcome, what the model
    read back, and the sink."""
    model = FakeModel([program(code), "done"])
    sink = RecordingSink()
    outcome = go(model, spec=coder(), registry=tools or registry([]), sink=sink, **kwargs)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    return model.requests[1].messages[-1], sink


def test_the_model_is_offered_run_code_listing_the_tools_as_functions():
    model = FakeModel(["hello"])
    go(model, spec=coder(), registry=registry([]))

    [offered] = model.requests[0].tools
    assert offered.name == RUN_CODE
    assert "def get_record(*, id: int, verbose: bool = ...) -> Any:  # Look up a record by id." in (
        offered.description
    )
    assert "More detail" not in offered.description
    limits = "1 s of execution, 32 MB of memory, 500 characters of output, 5 tool calls"
    assert f"limits: {limits}." in offered.description
    assert "get-record" not in model.requests[0].system  # the guide lists run_code only


def test_a_program_calls_three_tools_and_aggregates_each_call_recorded_as_its_own():
    executed: list[dict[str, Any]] = []
    code = (
        "rows = [get_record(id=i) for i in (1, 2, 3)]\n"
        "print('records', len(rows))\n"
        "{'total': sum(r['amount'] for r in rows)}"
    )
    result, sink = run_program(code, registry(executed))

    assert executed == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert not result.is_error
    assert result.content == 'records 3\nResult: {"total": 60}'
    started = [(e["call_id"], e["name"]) for e in sink.of("tool.started")]
    assert started == [
        ("p1", RUN_CODE),
        ("p1/1", "get-record"),
        ("p1/2", "get-record"),
        ("p1/3", "get-record"),
    ]
    completed = sink.of("tool.completed")
    assert [e["call_id"] for e in completed] == ["p1/1", "p1/2", "p1/3", "p1"]
    assert completed[0]["result"] == {"id": 1, "amount": 10}


def test_a_failed_tool_call_is_an_exception_the_program_can_catch():
    code = (
        "try:\n"
        "    get_record(id=-1)\n"
        "except Exception as e:\n"
        "    print('caught:', e)\n"
        "get_record(id=2)['amount']"
    )
    result, _ = run_program(code)
    assert result.content == "caught: get-record failed: no record -1\nResult: 20"


def test_an_uncaught_tool_error_is_reported_as_the_programs_error():
    result, _ = run_program("print('looking')\nget_record(id=-7)")
    assert result.is_error
    assert "get-record failed: no record -7" in result.content
    assert "Traceback" in result.content and "line 2" in result.content
    assert result.content.endswith("It printed before that:\nlooking")


def test_a_call_beyond_the_runs_tool_call_limit_is_refused_to_the_program():
    executed: list[dict[str, Any]] = []
    code = "for i in range(3):\n    get_record(id=i)"
    model = FakeModel([program(code), "done"])
    go(model, spec=coder(max_tool_calls=2), registry=registry(executed))
    assert executed == [{"id": 0}, {"id": 1}]
    result = model.requests[1].messages[-1]
    assert result.is_error and "tool call limit (2) reached" in result.content


def test_a_tool_needing_approval_parks_the_program_and_resumes_it_after_the_decision():
    executed: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    send = recording_tool(
        "send_email",
        sent,
        capability=Capability(effect=Effect.WRITE, idempotent=False, requires_approval=True),
    )
    tools = registry(executed, send)
    code = (
        "total = get_record(id=4)['amount']\n"
        "send_email(to='ann@example.org', body=f'total {total}')\n"
        "print('sent', total)"
    )
    checkpoint = SavingCheckpointer()
    sink = RecordingSink()
    outcome = go(
        FakeModel([program(code)]), spec=coder(), registry=tools, checkpoint=checkpoint, sink=sink
    )

    assert outcome.status is RunStatus.AWAITING_APPROVAL
    waiting = ToolCall("p1/2", "send_email", {"to": "ann@example.org", "body": "total 40"})
    assert outcome.awaiting == [waiting]
    assert sent == [] and executed == [{"id": 4}]
    assert sink.of("approval.required")[0]["call_id"] == "p1/2"
    parked = checkpoint.last_state()
    assert parked.programs["p1"]["calls"] == [
        ["get-record", {"id": 4}],
        ["send_email", {"to": "ann@example.org", "body": "total 40"}],
    ]

    model = FakeModel(["Sent it."])
    decided = resume(
        model,
        parked,
        spec=coder(),
        registry=tools,
        decisions={"p1/2": Decision(approved=True, by="alice")},
        checkpoint=checkpoint,
    )

    assert decided.status is RunStatus.SUCCEEDED
    assert sent == [{"to": "ann@example.org", "body": "total 40"}]  # once
    assert executed == [{"id": 4}]  # replayed from its record, not called again
    assert model.requests[0].messages[-1].content == "sent 40"
    assert checkpoint.last_state().programs == {}


def test_a_rejected_call_raises_in_the_program_with_who_rejected_it():
    sent: list[dict[str, Any]] = []
    send = recording_tool("send_email", sent, capability=Capability(requires_approval=True))
    tools = registry([], send)
    code = "try:\n    send_email(to='x')\nexcept Exception as e:\n    print(e)\n'after'"
    checkpoint = SavingCheckpointer()
    go(FakeModel([program(code)]), spec=coder(), registry=tools, checkpoint=checkpoint)
    model = FakeModel(["ok"])
    resume(
        model,
        checkpoint.last_state(),
        spec=coder(),
        registry=tools,
        decisions={"p1/1": Decision(approved=False, by="bob", reason="no")},
    )
    assert sent == []
    assert model.requests[0].messages[-1].content == (
        'send_email failed: rejected by bob: no\nResult: "after"'
    )


ESCAPES = {
    "file": ("open('/etc/passwd').read()", "PermissionError"),
    "os": ("import os\nos.listdir('/')", "PermissionError"),
    "environment": ("import os\nos.getenv('HOME')", "not supported"),
    "socket": ("import socket\nsocket.socket()", "No module named 'socket'"),
    "subprocess": ("import subprocess\nsubprocess.run(['ls'])", "No module named 'subprocess'"),
    "__import__": ("__import__('os').system('id')", "NameError"),
    "internals": ("().__class__.__bases__[0].__subclasses__()", "AttributeError"),
    "infinite loop": ("while True:\n    pass", "(its time limit: 1 s of execution)"),
    "memory bomb": ("'x' * 10**10", "(its memory limit: 32 MB)"),
    "growing list": ("a = []\nwhile True:\n    a.append('x' * 10000)", "its memory limit: 32 MB"),
    "deep recursion": ("def f(n):\n    return f(n + 1)\nf(0)", "its recursion limit: a depth of"),
    "huge output": ("while True:\n    print('x' * 100)", "(its output limit: 500 characters)"),
}


@pytest.mark.parametrize("attempt", ESCAPES, ids=list(ESCAPES))
def test_an_escape_attempt_is_stopped_and_reported_to_the_model(attempt):
    code, said = ESCAPES[attempt]
    executed: list[dict[str, Any]] = []
    result, sink = run_program(code, registry(executed))

    assert result.is_error
    assert said in result.content
    assert len(result.content) < 2500  # bounded, and no host traceback:
    assert "site-packages" not in result.content and "pydantic_monty" not in result.content
    if attempt in ("infinite loop", "memory bomb", "growing list", "deep recursion"):
        [stopped] = sink.of("code.stopped")
        assert stopped["call_id"] == "p1" and stopped["error"] == result.content
    assert executed == []


def test_a_syntax_error_comes_back_as_a_clear_error():
    result, _ = run_program("def (")
    assert result.is_error and "SyntaxError" in result.content


def test_too_many_tool_calls_stop_the_program():
    executed: list[dict[str, Any]] = []
    result, sink = run_program("for i in range(100):\n    get_record(id=i)", registry(executed))
    assert len(executed) == LIMITS.tool_calls
    assert result.is_error and "more than 5 tool calls" in result.content
    assert sink.of("code.stopped")[0]["reason"] == "tool_calls"


def test_positional_arguments_and_unknown_functions_are_errors_the_program_reads():
    code = (
        "out = []\n"
        "for f in (lambda: get_record(3), lambda: delete_everything()):\n"
        "    try:\n        f()\n    except Exception as e:\n        out.append(str(e))\n"
        "out"
    )
    result, _ = run_program(code)
    assert "keyword arguments" in result.content
    assert "name 'delete_everything' is not defined" in result.content


def test_a_replay_reads_the_same_clock_and_random_numbers_as_the_first_run():
    checkpoint = SavingCheckpointer()
    sent: list[dict[str, Any]] = []
    send = recording_tool("send_email", sent, capability=Capability(requires_approval=True))
    tools = registry([], send)
    code = "import time, random\nsend_email(at=time.time(), pick=random.random())\n'sent'"
    go(FakeModel([program(code)]), spec=coder(), registry=tools, checkpoint=checkpoint)
    model = FakeModel(["ok"])
    outcome = resume(
        model,
        checkpoint.last_state(),
        spec=coder(),
        registry=tools,
        decisions={"p1/1": Decision(approved=True, by="alice")},
    )
    assert outcome.status is RunStatus.SUCCEEDED
    assert len(sent) == 1  # the replay asked for the very call that was approved
    assert model.requests[0].messages[-1].content == 'Result: "sent"'


def test_a_replay_that_asks_for_another_call_is_stopped_not_given_its_result():
    state = RunState(
        pending_calls=[program("get_record(id=2)")],
        programs={
            "p1": {"clock": "2026-01-01T00:00:00+00:00", "calls": [["get-record", {"id": 1}]]}
        },
    )
    model = FakeModel(["ok"])
    executed: list[dict[str, Any]] = []
    resume(model, state, spec=coder(), registry=registry(executed))
    assert executed == []
    result = model.requests[0].messages[-1]
    assert result.is_error and "must make the same calls" in result.content


def test_signature_marks_optional_parameters_and_handles_a_tool_without_any():
    bare = Tool(name="ping", description="Ping.", input_schema={"type": "object"}, handler=dict)
    assert signature("ping", bare) == "def ping() -> Any:  # Ping."
