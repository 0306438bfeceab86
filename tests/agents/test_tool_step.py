"""The tool-call step (agents/runtime/tool_step.py): its order, its approval rule and its
durability rules, and that every entry kind — the agent loop, a remote agent, a workflow's
tool step, a direct call (REST, MCP; self-tests and verifiers are direct calls too) and a
parked call once approved — takes it the same way."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.runtime.crew import Suspended
from agents.runtime.loop import run_agent
from agents.runtime.remote import remote_agent
from agents.runtime.spec import AgentSpec, Decision
from agents.runtime.state import RunState
from agents.runtime.tool_step import NOT_CONFIRMED, UNKNOWN_OUTCOME, ApprovalRule, ToolCallStep
from agents.runtime.workflow import WorkflowContext, pipe, tool_step
from providers.runtime.fake import FakeModel
from providers.runtime.types import Usage
from tests.fakes.remote_agent_server import RemoteAgentServer, call, response, tool_call
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import ModelTokens, RunContext, UsageMeter
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.frames import Source
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.rate_limit import MemoryRateLimiter
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall, ToolFailed

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")
SIX_BY_SEVEN = {"expression": "6*7"}
# What the step does for one call that runs, in order: the same for every entry kind.
STEP = [
    ("tool.started", {"name": "calculator", "arguments": SIX_BY_SEVEN}),
    ("save", "tools_started"),
    ("execute", "calculator"),
    ("save", "tool_result"),
    ("tool.completed", {"name": "calculator", "result": {"result": 42}, "error": None}),
]


class Journal:
    """Sink and checkpoint at once, and the registry's executions (see `journal`): one list
    in the order things happened."""

    wants_text_deltas = False

    def __init__(self) -> None:
        self.entries: list[tuple[str, Any]] = []
        self.durable: list[tuple[str, bool]] = []  # (reason, waited until stored?)

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.entries.append((type, payload))

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        self.entries.append(("save", reason))
        self.durable.append((reason, durable))

    def step(self) -> list[tuple[str, Any]]:
        """From the first tool.started to the last tool.completed; payloads without what
        differs by entry (the call id, where it came from, the latency)."""
        kinds = [kind for kind, _ in self.entries]
        first = kinds.index("tool.started")
        last = len(kinds) - 1 - kinds[::-1].index("tool.completed")
        return [(kind, _same(value)) for kind, value in self.entries[first : last + 1]]


def _same(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if k not in ("call_id", "via", "latency_ms")}


@pytest.fixture
def journal(monkeypatch) -> Journal:
    """A journal that also records each execution through any ToolRegistry."""
    journal = Journal()
    execute = ToolRegistry.execute

    async def journaled(self, call, ctx):
        journal.entries.append(("execute", call.name))
        return await execute(self, call, ctx)

    monkeypatch.setattr(ToolRegistry, "execute", journaled)
    return journal


def recording_tool(name: str, executed: list, **capability: Any) -> Tool:
    async def handler(arguments: dict, ctx: RunContext) -> dict:
        executed.append(arguments)
        return {"done": name}

    return Tool(
        name, f"The {name} tool.", {"type": "object"}, handler, capability=Capability(**capability)
    )


def step(registry: ToolRegistry, journal: Journal, **options: Any) -> ToolCallStep:
    options.setdefault("approval", ApprovalRule())
    options.setdefault("ctx", CTX)
    return ToolCallStep(registry=registry, emit=journal.emit, checkpoint=journal, **options)


# -- the step alone --------------------------------------------------------------------------
def test_the_started_event_and_its_checkpoint_come_before_the_execution(journal):
    state = RunState()
    outcome = asyncio.run(
        step(BUILTINS, journal).run(state, [ToolCall("c1", "calculator", SIX_BY_SEVEN)])
    )
    assert journal.step() == STEP
    assert outcome.results["c1"].result == {"result": 42}
    assert state.results["c1"].content == '{"result": 42}' and state.started == {"c1"}


@pytest.mark.parametrize("idempotent", [True, False])
def test_only_a_call_that_must_not_run_twice_waits_until_its_start_is_stored(journal, idempotent):
    """A result, and the start of calls that may run again, are written while the run goes
    on (agents.runtime.state.Checkpointer)."""
    executed: list = []
    effect = Effect.READ if idempotent else Effect.WRITE
    tool = recording_tool("act", executed, effect=effect, idempotent=idempotent)
    asyncio.run(step(ToolRegistry([tool]), journal).run(RunState(), [ToolCall("c1", "act", {})]))
    assert executed == [{}]
    assert journal.durable == [("tools_started", not idempotent), ("tool_result", False)]


def test_a_call_that_requires_approval_emits_saves_and_executes_nothing_until_decided(journal):
    executed: list = []
    registry = ToolRegistry([recording_tool("pay", executed, requires_approval=True)])
    state = RunState(pending_calls=[ToolCall("p1", "pay", {"amount": 5})])
    before = state.to_dict()

    outcome = asyncio.run(step(registry, journal).run(state, state.pending_calls))

    assert outcome.awaiting == [ToolCall("p1", "pay", {"amount": 5})]
    assert (journal.entries, executed, state.to_dict()) == ([], [], before)

    decided = {"p1": Decision(approved=True, by="alice", arguments={"amount": 3})}
    asyncio.run(step(registry, journal, decisions=decided).run(state, state.pending_calls))
    assert executed == [{"amount": 3}]


def test_writes_wait_under_the_writes_policy_and_nothing_waits_under_never(journal):
    executed: list = []
    registry = ToolRegistry([recording_tool("drop", executed, effect=Effect.DESTRUCTIVE)])
    calls = [ToolCall("d1", "drop", {})]
    writes = asyncio.run(
        step(registry, journal, approval=ApprovalRule("writes")).run(RunState(), calls)
    )
    flagged = asyncio.run(
        step(registry, journal, approval=ApprovalRule("flagged")).run(RunState(), calls)
    )
    assert (writes.awaiting, flagged.awaiting, executed) == (calls, [], [{}])


def test_a_decision_is_followed_even_if_the_tool_no_longer_requires_approval(journal):
    executed: list = []
    registry = ToolRegistry([recording_tool("pay", executed)])  # unflagged since it parked
    state = RunState(pending_calls=[ToolCall("p1", "pay", {})])
    rejected = {"p1": Decision(approved=False, by="alice", reason="no")}
    asyncio.run(step(registry, journal, decisions=rejected).run(state, state.pending_calls))
    assert executed == [] and state.results["p1"].content == "rejected by alice: no"
    assert [kind for kind, _ in journal.entries] == ["save", "tool.completed"]


def test_a_recorded_call_is_never_executed_again_and_an_interrupted_one_is_not_repeated(journal):
    executed: list = []
    registry = ToolRegistry(
        [recording_tool("once", executed, idempotent=False), recording_tool("again", executed)]
    )
    calls = [ToolCall("o1", "once", {}), ToolCall("a1", "again", {"n": 1})]
    state = RunState(pending_calls=calls, started={"o1", "a1"})
    approved = {"o1": Decision(approved=True, by="alice")}  # approved, yet not repeated

    asyncio.run(step(registry, journal, decisions=approved).run(state, calls))
    assert executed == [{"n": 1}]  # the idempotent one ran again
    assert state.results["o1"].content == UNKNOWN_OUTCOME

    asyncio.run(step(registry, journal).run(state, calls))  # resumed once more: all recorded
    assert executed == [{"n": 1}]


def test_after_a_restart_the_calls_behind_a_recorded_one_still_run(journal):
    calls = [
        ToolCall("c1", "calculator", SIX_BY_SEVEN),
        ToolCall("c2", "calculator", {"expression": "1+1"}),
    ]
    state = RunState(pending_calls=calls)
    asyncio.run(step(BUILTINS, journal).run(state, calls[:1]))  # c1 recorded, then a restart
    asyncio.run(step(BUILTINS, journal).run(state, calls))
    assert [kind for kind, _ in journal.entries].count("execute") == 2
    assert state.results["c2"].content == '{"result": 2}'


def test_a_rejection_without_a_reason_reads_rejected_by_whom(journal):
    executed: list = []
    registry = ToolRegistry([recording_tool("pay", executed, requires_approval=True)])
    state = RunState(pending_calls=[ToolCall("p1", "pay", {})])
    rejected = {"p1": Decision(approved=False, by="alice")}
    asyncio.run(step(registry, journal, decisions=rejected).run(state, state.pending_calls))
    assert executed == [] and state.results["p1"].content == "rejected by alice"


def test_an_approved_call_runs_with_the_approvers_arguments_and_its_inputs(journal):
    executed: list = []

    async def find(arguments: dict, ctx: RunContext) -> dict:
        return {"id": 4711}

    async def note(arguments: dict, ctx: RunContext) -> dict:
        executed.append(arguments)
        return {"ok": True}

    schema = {"type": "object", "properties": {"customer_id": {"type": "integer"}}}
    note_tool = Tool(
        "note", "Note.", schema, note, depends_on={"customer_id": Source("find", "$.id")},
        capability=Capability(requires_approval=True),
    )  # fmt: skip
    registry = ToolRegistry([Tool("find", "Find.", {"type": "object"}, find), note_tool])
    state = RunState()
    asyncio.run(step(registry, journal).run(state, [ToolCall("f1", "find", {})]))
    decided = {"n1": Decision(approved=True, by="alice", arguments={"text": "edited"})}
    calls = [ToolCall("n1", "note", {"text": "asked"})]
    asyncio.run(step(registry, journal, decisions=decided).run(state, calls))
    assert executed == [{"text": "edited", "customer_id": 4711}]


def test_an_approved_request_is_shown_with_the_arguments_it_was_prepared_from(journal):
    class Sender:
        def prepare(self, arguments, ctx):
            return PreparedRequest("POST", "https://api.example/x", (), str(arguments["x"]))

        async def send(self, request, ctx):
            return "sent"

    item = Tool(
        "post", "Post.", {"type": "object"}, lambda a, c: None, preparer=Sender(),
        capability=Capability(requires_approval=True),
    )  # fmt: skip
    prepared = PreparedRequest("POST", "https://api.example/x", (), "2")
    decided = {"p1": Decision(approved=True, by="alice", arguments={"x": 2}, prepared=prepared)}
    state = RunState()
    calls = [ToolCall("p1", "post", {"x": 1})]
    asyncio.run(step(ToolRegistry([item]), journal, decisions=decided).run(state, calls))
    [started] = [p for kind, p in journal.entries if kind == "tool.started"]
    assert started["arguments"] == {"x": 2} and state.results["p1"].content == "sent"


def test_a_call_whose_inputs_cannot_be_had_is_refused_asked_or_approved(journal):
    async def find(arguments: dict, ctx: RunContext) -> dict:
        raise ToolFailed("the CRM is down")

    schema = {"type": "object", "properties": {"customer_id": {"type": "integer"}}}
    registry = ToolRegistry(
        [
            Tool("find", "Find.", {"type": "object"}, find),
            Tool("note", "Note.", schema, find, depends_on={"customer_id": Source("find", "$.id")}),
        ]
    )
    state = RunState()
    decided = {"n2": Decision(approved=True, by="alice")}
    calls = [ToolCall("n1", "note", {}), ToolCall("n2", "note", {})]
    outcome = asyncio.run(step(registry, journal, decisions=decided).run(state, calls))
    for call_id in ("n1", "n2"):  # saying which input is missing and whose result it needs
        assert state.results[call_id].is_error and "customer_id" in outcome.results[call_id].error


def test_a_request_asked_for_carries_its_frame_inputs_or_is_refused_without_them(journal):
    class Sender:
        def prepare(self, arguments, ctx):
            return PreparedRequest("POST", "https://crm.example/notes", (), json.dumps(arguments))

        async def send(self, request, ctx):
            return "sent"

    def registry(found: bool) -> ToolRegistry:
        async def find(arguments: dict, ctx: RunContext) -> dict:
            if not found:
                raise ToolFailed("the CRM is down")
            return {"id": 4711}

        schema = {"type": "object", "properties": {"customer_id": {"type": "integer"}}}
        note = Tool(
            "note", "Note.", schema, find, preparer=Sender(),
            depends_on={"customer_id": Source("find", "$.id")},
            capability=Capability(requires_approval=True),
        )  # fmt: skip
        return ToolRegistry([Tool("find", "Find.", {"type": "object"}, find), note])

    asked = asyncio.run(step(registry(True), journal).run(RunState(), [ToolCall("n1", "note", {})]))
    [waiting] = asked.awaiting
    assert json.loads(waiting.prepared.body) == {"customer_id": 4711}
    state = RunState()
    refused = asyncio.run(step(registry(False), journal).run(state, [ToolCall("n2", "note", {})]))
    assert refused.awaiting == [] and "customer_id" in state.results["n2"].content


def _crm(executed: list, find_schema: dict | None = None, **find_capability: Any) -> ToolRegistry:
    """find (a producer: {"id": 4711}) and note (its customer_id from find's $.id)."""

    async def find(arguments: dict, ctx: RunContext) -> dict:
        executed.append(("find", arguments))
        return {"id": 4711}

    async def note(arguments: dict, ctx: RunContext) -> dict:
        executed.append(("note", arguments))
        return {"ok": True}

    schema = {"type": "object", "properties": {"customer_id": {"type": "integer"}}}
    return ToolRegistry(
        [
            Tool("find", "Find.", find_schema or {"type": "object"}, find,
                 capability=Capability(**find_capability)),
            Tool("note", "Note.", schema, note, depends_on={"customer_id": Source("find", "$.id")}),
        ]
    )  # fmt: skip


def test_a_reading_producer_without_a_result_is_run_first_for_its_consumer(journal):
    executed: list = []
    state = RunState(tool_calls=5)
    calls = [ToolCall("n1", "note", {"text": "hi"})]
    asyncio.run(step(_crm(executed), journal, via="rest").run(state, calls))
    assert executed == [("find", {}), ("note", {"text": "hi", "customer_id": 4711})]
    assert state.tool_calls == 7  # the producer's call counts toward the run's limit

    def brief(kind: str, value: Any) -> tuple:
        if isinstance(value, dict):
            return (kind, value["call_id"], value.get("for"), value.get("via"))
        return (kind, value)

    assert [brief(kind, value) for kind, value in journal.entries][:4] == [
        ("tool.started", "n1~find", "n1", "rest"),
        ("execute", "find"),
        ("save", "tool_result"),
        ("tool.completed", "n1~find", "n1", None),
    ]


@pytest.mark.parametrize(
    ("find_schema", "find_capability", "tool_calls"),
    [
        (None, {"requires_approval": True}, 0),  # a human must say yes first
        (None, {"effect": Effect.WRITE}, 0),  # it changes something
        ({"type": "object", "required": ["email"]}, {}, 0),  # an input the call lacks
        (None, {}, 1),  # the run has no call left
    ],
)
def test_a_producer_is_not_run_unasked_when_it_is_not_safe_to(
    journal, find_schema, find_capability, tool_calls
):
    executed: list = []
    state = RunState(tool_calls=tool_calls)
    registry = _crm(executed, find_schema, **find_capability)
    asyncio.run(step(registry, journal, max_tool_calls=1).run(state, [ToolCall("n1", "note", {})]))
    assert ("find", {}) not in executed and state.results["n1"].is_error
    assert [kind for kind, _ in journal.entries if kind == "tool.started"] == []


def test_a_producer_that_takes_inputs_itself_or_is_gone_is_not_run_unasked(journal):
    executed: list = []

    async def lookup(arguments: dict, ctx: RunContext) -> dict:
        executed.append("lookup")
        return {"id": 1}

    chained = Tool(
        "lookup", "Lookup.", {"type": "object", "properties": {"email": {"type": "string"}}},
        lookup, depends_on={"email": Source("whoami", "$.email")},
    )  # fmt: skip
    schema = {"type": "object", "properties": {"customer_id": {"type": "integer"}}}
    for producer in ("lookup", "gone"):
        note = Tool(
            "note", "Note.", schema, lookup, depends_on={"customer_id": Source(producer, "$.id")}
        )
        state = RunState()
        asyncio.run(
            step(ToolRegistry([chained, note]), journal).run(state, [ToolCall("n1", "note", {})])
        )
        assert executed == [] and state.results["n1"].is_error


def test_calls_past_the_limit_are_refused_before_any_starts(journal):
    calls = [ToolCall(f"c{n}", "calculator", SIX_BY_SEVEN) for n in range(3)]
    state = RunState(tool_calls=1)
    asyncio.run(step(BUILTINS, journal, max_tool_calls=2).run(state, calls))
    kinds = [kind for kind, _ in journal.entries]
    assert kinds[:4] == ["save", "tool.completed", "save", "tool.completed"]  # c1, c2 refused
    assert kinds[4:6] == ["tool.started", "save"] and kinds.count("execute") == 1
    assert "limit (2)" in state.results["c2"].content and state.tool_calls == 2


def test_a_run_at_its_call_limit_runs_no_call_and_the_model_reads_why(journal):
    state = RunState(tool_calls=2)
    outcome = asyncio.run(
        step(BUILTINS, journal, max_tool_calls=2).run(
            state, [ToolCall("c9", "calculator", SIX_BY_SEVEN)]
        )
    )
    assert "execute" not in [kind for kind, _ in journal.entries] and state.tool_calls == 2
    refused = "tool call limit (2) reached for this run; answer with what you have"
    assert state.results["c9"].content == refused
    # What the direct-call faces answer with: the refused call under its own id and name.
    result = outcome.results["c9"]
    assert (result.call_id, result.name, result.error) == ("c9", "calculator", refused)


def test_two_calls_of_one_response_both_run_and_are_recorded(journal):
    calls = [
        ToolCall("c1", "calculator", SIX_BY_SEVEN),
        ToolCall("c2", "calculator", {"expression": "1+1"}),
    ]
    state = RunState()
    outcome = asyncio.run(step(BUILTINS, journal, via="rest").run(state, calls))
    assert [kind for kind, _ in journal.entries].count("execute") == 2
    started = [p for kind, p in journal.entries if kind == "tool.started"]
    assert [(p["call_id"], p["via"]) for p in started] == [("c1", "rest"), ("c2", "rest")]
    completed = {p["call_id"]: p for kind, p in journal.entries if kind == "tool.completed"}
    for call_id, result in outcome.results.items():  # milliseconds, to the µs
        assert completed[call_id]["latency_ms"] == round(result.latency_ms, 3)
    assert state.results["c1"].content == '{"result": 42}'
    assert state.results["c2"].content == '{"result": 2}'
    assert {i: (r.call_id, r.result) for i, r in outcome.results.items()} == {
        "c1": ("c1", {"result": 42}), "c2": ("c2", {"result": 2}),
    }  # fmt: skip


def test_a_result_reads_as_json_with_its_text_as_written_and_dates_as_text(journal):
    async def weather(arguments: dict, ctx: RunContext) -> dict:
        return {"city": "Zürich", "at": datetime(2026, 1, 2, 3, 4)}

    registry = ToolRegistry([Tool("weather", "Weather.", {"type": "object"}, weather)])
    state = RunState()
    asyncio.run(step(registry, journal).run(state, [ToolCall("w1", "weather", {})]))
    assert state.results["w1"].content == '{"city": "Zürich", "at": "2026-01-02 03:04:00"}'


def test_what_a_tool_spent_on_models_counts_in_the_run_usage_cache_tokens_too(journal):
    async def summarize(arguments: dict, ctx: RunContext) -> str:
        ctx.usage.add(ctx.call_id, ModelTokens("openai", "gpt", 10, 20, 30, 40))
        return "short"

    registry = ToolRegistry([Tool("summarize", "Summarize.", {"type": "object"}, summarize)])
    state = RunState()
    ctx = replace(CTX, usage=UsageMeter())
    asyncio.run(step(registry, journal, ctx=ctx).run(state, [ToolCall("u1", "summarize", {})]))
    assert state.usage == Usage(10, 20, 30, 40)
    [models] = [p["models"] for kind, p in journal.entries if kind == "tool.usage"]
    assert models == [ModelTokens("openai", "gpt", 10, 20, 30, 40).to_dict()]


def test_a_result_with_references_is_shown_through_the_tools_view(journal):
    async def slots(arguments: dict, ctx: RunContext) -> dict:
        return {"id": 17, "room": "B"}

    item = Tool(
        "slots", "Slots.", {"type": "object"}, slots,
        references={"id": "slot"}, view=lambda data: {"only": data["id"]},
    )  # fmt: skip
    state = RunState()
    asyncio.run(step(ToolRegistry([item]), journal).run(state, [ToolCall("s1", "slots", {})]))
    assert state.results["s1"].content == '{"only": "slot#1"}'


def test_a_failed_producer_call_leaves_its_last_result_to_its_consumers(journal):
    answers = iter([{"id": 4711}, ToolFailed("the CRM is down")])

    async def find(arguments: dict, ctx: RunContext) -> dict:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def note(arguments: dict, ctx: RunContext) -> dict:
        return {"noted": arguments["customer_id"]}

    schema = {"type": "object", "properties": {"customer_id": {"type": "integer"}}}
    registry = ToolRegistry(
        [
            Tool("find", "Find.", {"type": "object"}, find),
            Tool("note", "Note.", schema, note, depends_on={"customer_id": Source("find", "$.id")}),
        ]
    )
    state = RunState()
    for one in (
        ToolCall("f1", "find", {}),
        ToolCall("f2", "find", {}),
        ToolCall("n1", "note", {}),
    ):
        asyncio.run(step(registry, journal).run(state, [one]))
    assert state.results["f2"].content == "the CRM is down"
    assert state.results["n1"].content == '{"noted": 4711}'


def test_a_call_over_its_rate_limit_is_recorded_with_its_event_in_the_results_save(journal):
    executed: list = []
    registry = ToolRegistry([recording_tool("search", executed, rate_limit_per_minute=1)])
    ctx = replace(CTX, rate_limiter=MemoryRateLimiter())
    state = RunState()
    for one in (ToolCall("s1", "search", {}), ToolCall("s2", "search", {})):  # two rounds
        asyncio.run(step(registry, journal, ctx=ctx).run(state, [one]))
    assert executed == [{}]
    kinds = [kind for kind, _ in journal.entries]
    assert kinds[-6:] == [
        "tool.started", "save", "execute", "tool.rate_limited", "save", "tool.completed"
    ]  # fmt: skip
    assert journal.entries[-3][1] == {
        "call_id": "s2", "name": "search", "limit": 1, "retry_after_s": 60
    }  # fmt: skip
    refused = state.results["s2"]
    assert refused.is_error and "search is limited to 1 calls per minute" in refused.content


def test_a_call_that_waits_for_approval_is_counted_when_it_executes(journal):
    executed: list = []
    registry = ToolRegistry(
        [recording_tool("pay", executed, requires_approval=True, rate_limit_per_minute=1)]
    )
    ctx = replace(CTX, rate_limiter=MemoryRateLimiter())
    parked = [RunState(pending_calls=[ToolCall(f"p{n}", "pay", {"n": n})]) for n in (1, 2)]
    for state in parked:  # both wait; counted now, the first approved would be refused
        outcome = asyncio.run(step(registry, journal, ctx=ctx).run(state, state.pending_calls))
        assert outcome.awaiting
    for n, state in enumerate(parked, 1):
        decided = {f"p{n}": Decision(approved=True, by="alice")}
        asyncio.run(
            step(registry, journal, ctx=ctx, decisions=decided).run(state, state.pending_calls)
        )
    assert executed == [{"n": 1}]  # the second, approved in the same minute, is over the limit
    assert "limited to 1 calls per minute" in parked[1].results["p2"].content


def test_unattended_a_call_that_needs_a_human_or_waits_on_one_gets_an_error(journal):
    async def delegate(arguments: dict, ctx: RunContext) -> Suspended:
        return Suspended("writer waits")

    registry = ToolRegistry(
        [
            recording_tool("pay", [], requires_approval=True),
            Tool("delegate", "Delegate.", {"type": "object"}, delegate),
        ]
    )
    calls = [ToolCall("p1", "pay", {}), ToolCall("d1", "delegate", {})]
    state = RunState()
    outcome = asyncio.run(step(registry, journal, unattended="nobody approves").run(state, calls))
    assert (outcome.awaiting, outcome.suspended) == ([], [])
    assert state.results["p1"].content == "nobody approves"
    assert state.results["d1"].content == (
        "not run: writer waits, and nothing here can wait for a person"
    )  # (not the approval's sentence: it needs no approval)
    assert outcome.results["d1"].result is None  # an error, not the child's waiting


# -- every entry kind takes it ------------------------------------------------------------------
def test_the_agent_loop_takes_the_step(journal):
    spec = AgentSpec(name="a", instructions="", model="fake")
    model = FakeModel([ToolCall("c1", "calculator", SIX_BY_SEVEN), "42"])
    asyncio.run(
        run_agent(
            spec=spec, adapter=model, registry=BUILTINS, ctx=CTX, input="6*7?", sink=journal,
            checkpoint=journal,
        )
    )  # fmt: skip
    assert journal.step() == STEP


def test_a_remote_agent_takes_the_step(journal):
    with RemoteAgentServer() as server:
        spec = AgentSpec(
            name="r", instructions="", model="remote", kind="remote", remote_url=server.url
        )
        server.script(tool_call([call("c1", "calculator", SIX_BY_SEVEN)]), response("42"))
        asyncio.run(
            remote_agent(
                spec=spec, registry=BUILTINS,
                ctx=CTX, egress=GuardedHttpClient(EgressPolicy(allowlist=("127.0.0.1/32",))),
                input="6*7?", sink=journal, checkpoint=journal,
            )
        )  # fmt: skip
    assert journal.step() == STEP


def test_a_workflows_tool_step_takes_the_step(journal):
    """Without durable state of its own (no saves); its events renamed workflow.tool.*."""

    class ToolEvents:
        wants_text_deltas = False

        async def emit(self, type: str, payload: dict[str, Any]) -> None:
            if type.startswith("workflow.tool."):
                step = payload.pop("step")
                assert step == "calculator"
                await journal.emit(type.removeprefix("workflow."), payload)

    wctx = WorkflowContext(registry=BUILTINS, ctx=CTX, sink=ToolEvents())
    assert asyncio.run(pipe(tool_step("calculator")).run(SIX_BY_SEVEN, wctx)) == {"result": 42}
    assert journal.step() == [entry for entry in STEP if entry[0] != "save"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("face", ["rest", "mcp"])
def test_a_direct_call_takes_the_step(trio, journal, monkeypatch, face):
    """Recorded once, after the call: the same events in the same order, without the saves."""
    from agents.models import RunEvent
    from agents.runs import direct_calls as tool_runs
    from agents.runs import writer as run_writer
    from tenancy import services as tenancy

    kept = tool_runs._Events.emit

    async def emit(self, type, payload):
        await journal.emit(type, payload)
        await kept(self, type, payload)

    monkeypatch.setattr(tool_runs._Events, "emit", emit)
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read", "run"])
    if face == "rest":
        outcome = tool_runs.tool_run(
            tenant=trio.acme, name="calculator", arguments=SIX_BY_SEVEN, api_key=key
        )
    else:

        async def over_mcp():
            try:
                return await tool_runs.atool_run(
                    tenant=trio.acme, name="calculator", arguments=SIX_BY_SEVEN, api_key=key,
                    via="mcp",
                )  # fmt: skip
            finally:
                await run_writer.aclose()

        outcome = async_to_sync(over_mcp)()
    assert journal.step() == [entry for entry in STEP if entry[0] != "save"]
    stored = RunEvent.objects.filter(run_id=outcome.run_id).order_by("seq")
    assert [(e.type, _same(e.payload)) for e in stored] == journal.step()[::2]


@pytest.mark.django_db(transaction=True)
def test_a_parked_call_once_approved_takes_the_step(trio, journal):
    from agents.models import Approval, Run, RunEvent
    from agents.runs.direct_calls import execute_tool_run, tool_run
    from tools.models import ToolDefinition

    ToolDefinition.objects.create(
        tenant=trio.acme, name="gated_calc", kind="builtin", config={"builtin": "calculator"},
        requires_approval=True,
    )  # fmt: skip
    outcome = tool_run(tenant=trio.acme, name="gated_calc", arguments=SIX_BY_SEVEN, user=trio.alice)
    assert journal.entries == []  # parked: nothing executed
    assert list(RunEvent.objects.filter(run_id=outcome.run_id).values_list("type", flat=True)) == [
        "approval.required"
    ]
    # Decided without queueing the run (a Celery worker of the session would take it).
    Approval.objects.filter(run_id=outcome.run_id).update(status="approved")
    run = Run.objects.select_related("tenant").get(pk=outcome.run_id)
    journal.writer = SimpleNamespace(redact_with=lambda secrets: None)  # what it asks of a sink

    async def worker_part():
        return await execute_tool_run(run, journal, journal)

    async_to_sync(worker_part)()
    expected = [
        (kind, {**value, "name": "gated_calc"} if isinstance(value, dict) else value)
        for kind, value in STEP
    ]
    expected[2] = ("execute", "gated_calc")
    assert journal.step() == expected
    assert journal.entries[-1] == (
        "run.completed",
        {"status": "succeeded", "output": '{"result": 42}'},
    )


# -- confirmation of the exact request (tools with a preparer) -----------------------------
class _Preparer:
    def __init__(self) -> None:
        self.sent: list[PreparedRequest] = []

    def prepare(self, arguments, ctx):
        return PreparedRequest("POST", "https://bank.example/pay", (), f'{{"n":{arguments["n"]}}}')

    async def send(self, request, ctx):
        self.sent.append(request)
        return {"ok": True}


def _pay(preparer: _Preparer) -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(
                name="pay", description="Pay.", handler=lambda a, c: None, preparer=preparer,
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
                capability=Capability(effect=Effect.WRITE, requires_approval=True),
            )
        ]
    )  # fmt: skip


def _step(registry: ToolRegistry, decisions=None) -> tuple[ToolCallStep, Journal]:
    journal = Journal()
    step = ToolCallStep(
        registry=registry, ctx=CTX, emit=journal.emit, checkpoint=journal,
        approval=ApprovalRule("flagged"), decisions=decisions,
    )  # fmt: skip
    return step, journal


def test_a_call_that_needs_approval_waits_with_its_prepared_request_and_sends_only_it():
    preparer = _Preparer()
    call_ = ToolCall("c1", "pay", {"n": 5})
    step, journal = _step(_pay(preparer))
    outcome = async_to_sync(step.run)(RunState(pending_calls=[call_]), [call_])
    [waiting] = outcome.awaiting
    assert waiting.prepared.body == '{"n":5}' and journal.entries == [] and preparer.sent == []

    approved = Decision(approved=True, by="alice", arguments={"n": 5}, prepared=waiting.prepared)
    step, journal = _step(_pay(preparer), {"c1": approved})
    async_to_sync(step.run)(RunState(pending_calls=[call_]), [call_])
    assert preparer.sent == [waiting.prepared]
    started = next(p for kind, p in journal.entries if kind == "tool.started")
    assert started["prepared_request"] == waiting.prepared.to_dict()


def test_an_approval_without_its_request_or_an_unpreparable_call_sends_nothing():
    preparer = _Preparer()
    call_ = ToolCall("c1", "pay", {"n": 5})
    blind = Decision(approved=True, by="alice", arguments={"n": 6})  # no request approved
    step, _ = _step(_pay(preparer), {"c1": blind})
    outcome = async_to_sync(step.run)(RunState(pending_calls=[call_]), [call_])
    assert outcome.results["c1"].error == NOT_CONFIRMED

    bad = ToolCall("c2", "pay", {"n": "five"})
    step, _ = _step(_pay(preparer))
    outcome = async_to_sync(step.run)(RunState(pending_calls=[bad]), [bad])
    assert not outcome.awaiting and outcome.results["c2"].error.startswith("invalid arguments")
    assert preparer.sent == []
