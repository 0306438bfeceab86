"""Workflows (agents/runtime/workflow.py): deterministic composition of tool, transform and
agent steps, and workflows as tools. FakeModel and built-in tools only: no network, no
database."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunStatus
from agents.runtime.state import NoCheckpoint, RunState
from agents.runtime.tool_step import ApprovalRule, ToolCallStep
from agents.runtime.workflow import (
    SUMMARY_CHARS,
    UNATTENDED,
    Workflow,
    WorkflowContext,
    WorkflowFailed,
    agent_step,
    branch,
    parallel,
    pipe,
    tool_step,
    transform,
    workflow_tool,
)
from providers.runtime.errors import AuthenticationFailed
from providers.runtime.fake import FakeModel
from providers.runtime.types import ToolResultMessage, Usage
from tests.sample_plugins import sample_module
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import REDACTED, ModelTokens, RunContext, StaticSecrets, UsageMeter
from tools.runtime.rate_limit import MemoryRateLimiter
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall, ToolFailed

# The example workflow: the sample plug-in's (docs/examples/plugins/sample_workflows).
sample = sample_module("sample_workflows")
EXAMPLE_WORKFLOW_TOOLS, compound_interest = sample.TOOLS, sample.compound_interest

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")
ANY_OBJECT = {"type": "object"}


class RecordingSink:
    wants_text_deltas = False

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.events.append((type, payload))

    def steps(self, type: str) -> list[str]:
        return [payload["step"] for kind, payload in self.events if kind == type]

    def of(self, type: str) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.events if kind == type]


def go(
    workflow: Workflow,
    value: Any,
    *,
    registry: ToolRegistry = BUILTINS,
    sink: RecordingSink | None = None,
    ctx: RunContext = CTX,
    **wctx: Any,
) -> Any:
    context = WorkflowContext(registry=registry, ctx=ctx, sink=sink, **wctx)
    return asyncio.run(workflow.run(value, context))


def make_spec(**overrides: Any) -> AgentSpec:
    return AgentSpec(name="helper", instructions="Be brief.", model="fake-model", **overrides)


def add_one(value: int) -> int:
    return value + 1


def double(value: int) -> int:
    return value * 2


# -- composition -------------------------------------------------------------------------
def test_pipe_and_then_run_steps_in_order() -> None:
    base = pipe(add_one, double)
    longer = base.then(transform(str, label="as-text"))

    assert go(base, 3) == 8
    assert go(longer, 3) == "8"
    assert len(base.steps) == 2  # then() returns a new workflow; base is unchanged


def test_async_transforms_are_awaited() -> None:
    async def slow_add_one(value: int) -> int:
        await asyncio.sleep(0)
        return value + 1

    assert go(pipe(slow_add_one, double), 1) == 4


def test_parallel_runs_branches_concurrently_and_keeps_their_order() -> None:
    finished: list[str] = []
    second_finished = asyncio.Event()

    async def first(value: Any) -> str:
        # Only branches that overlap get past this: run one after the other, it times out.
        await asyncio.wait_for(second_finished.wait(), timeout=30)
        finished.append("first")
        return f"first:{value}"

    async def second(value: Any) -> str:
        finished.append("second")
        second_finished.set()
        return f"second:{value}"

    result = go(pipe(add_one).parallel(first, second), 1)

    assert finished == ["second", "first"]  # the first branch waited for the second to finish
    assert result == ["first:2", "second:2"]  # and the results keep the branches' order


def test_parallel_with_keyword_branches_gives_a_dict() -> None:
    workflow = pipe(parallel(plus=add_one, times=double))

    assert go(workflow, 5) == {"plus": 6, "times": 10}


def test_parallel_refuses_mixed_or_missing_branches() -> None:
    with pytest.raises(ValueError, match="not both"):
        parallel(add_one, times=double)
    with pytest.raises(ValueError, match="at least one"):
        parallel()


def test_branch_takes_the_path_the_predicate_chooses() -> None:
    workflow = pipe().branch(
        lambda value: value > 10,
        transform(lambda value: f"big {value}", label="big"),
        transform(lambda value: f"small {value}", label="small"),
    )
    sink = RecordingSink()

    assert go(workflow, 11, sink=sink) == "big 11"
    assert go(workflow, 3) == "small 3"
    assert "small" not in sink.steps("workflow.step.started")


def test_branch_without_if_false_passes_the_value_on() -> None:
    async def is_even(value: int) -> bool:  # predicates may be async
        return value % 2 == 0

    workflow = pipe(branch(is_even, double), add_one)

    assert go(workflow, 4) == 9
    assert go(workflow, 3) == 4


def test_workflows_nest_as_steps() -> None:
    inner = pipe(add_one, double, label="inner")
    outer = pipe(add_one).then(inner).then(inner)
    sink = RecordingSink()

    assert go(outer, 0, sink=sink) == 10  # ((0 + 1) + 1) * 2 = 4; (4 + 1) * 2 = 10
    assert sink.steps("workflow.step.started") == [
        "add_one",
        "inner",
        "add_one",
        "double",
        "inner",
        "add_one",
        "double",
    ]


# -- tool and agent steps ----------------------------------------------------------------
def test_tool_steps_run_registry_tools() -> None:
    registry = ToolRegistry(BUILTINS)
    workflow = pipe(
        tool_step("calculator", lambda value: {"expression": f"{value} * 6"}),
        tool_step("calculator", lambda value: {"expression": f"{value['result']} + 1"}),
    )

    assert go(workflow, 7, registry=registry) == {"result": 43}


def test_tool_step_into_keeps_the_input_and_adds_the_result() -> None:
    workflow = pipe(
        tool_step("calculator", lambda value: {"expression": value["expression"]}, into="answer")
    )

    assert go(workflow, {"expression": "2 ** 10"}) == {
        "expression": "2 ** 10",
        "answer": {"result": 1024},
    }


def test_tool_step_without_arguments_passes_the_value_as_arguments() -> None:
    assert go(pipe(tool_step("calculator")), {"expression": "1 + 1"}) == {"result": 2}


def test_agent_step_runs_an_agent_and_yields_its_answer() -> None:
    model = FakeModel(
        [ToolCall(id="c1", name="calculator", arguments={"expression": "6 * 7"}), "It is 42."]
    )
    spec = make_spec(tool_names=("calculator",))
    workflow = pipe(
        agent_step(spec, adapter=model, prompt=lambda value: f"What is {value}?"),
        str.upper,
    )
    sink = RecordingSink()

    assert go(workflow, "6 times 7", sink=sink) == "IT IS 42."
    assert model.requests[0].messages[0].text == "What is 6 times 7?"
    assert [tool.name for tool in model.requests[0].tools] == ["calculator"]
    # The agent's own events are namespaced so they never end the enclosing run's stream.
    types = [kind for kind, _ in sink.events]
    assert "workflow.agent.run.started" in types
    assert "workflow.agent.tool.completed" in types
    assert "run.completed" not in types
    assert sink.of("workflow.agent.run.completed")[0]["step"] == "helper"


def test_agent_step_with_an_output_schema_yields_the_structured_output() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    model = FakeModel([ToolCall(id="f1", name="final_answer", arguments={"city": "Paris"})])
    workflow = pipe(agent_step(make_spec(output_schema=schema), adapter=model, into="place"))

    assert go(workflow, {"text": "I live in Paris"}) == {
        "text": "I live in Paris",
        "place": {"city": "Paris"},
    }
    assert json.loads(model.requests[0].messages[0].text) == {"text": "I live in Paris"}


def test_agent_step_gets_its_adapter_from_the_context_at_run_time() -> None:
    model = FakeModel(["bonjour"])
    workflow = pipe(agent_step(make_spec(), label="translate"))

    assert go(workflow, "hello", adapter_for=lambda spec: model) == "bonjour"

    with pytest.raises(WorkflowFailed, match="step 'translate' failed: ConfigurationError"):
        go(workflow, "hello")


# -- failures ----------------------------------------------------------------------------
def later_step(ran: list[str]):
    def record(value: Any) -> Any:
        ran.append("later")
        return value

    return transform(record, label="later")


def test_a_tool_error_stops_the_workflow_and_names_the_step() -> None:
    ran: list[str] = []
    workflow = pipe(
        tool_step("calculator", lambda value: {"expression": "1 / 0"}, label="divide"),
        later_step(ran),
    )
    sink = RecordingSink()

    with pytest.raises(WorkflowFailed) as failure:
        go(workflow, None, sink=sink)

    assert failure.value.step == "divide"
    assert str(failure.value).startswith("step 'divide' failed: ")
    assert "zero" in str(failure.value)
    assert ran == []
    assert sink.steps("workflow.step.failed") == ["divide"]
    assert "later" not in sink.steps("workflow.step.started")


def test_an_exception_in_a_transform_stops_the_workflow() -> None:
    ran: list[str] = []

    def parse(value: str) -> int:
        return int(value)

    with pytest.raises(WorkflowFailed) as failure:
        go(pipe(parse, later_step(ran)), "twelve")

    assert str(failure.value) == (
        "step 'parse' failed: ValueError: invalid literal for int() with base 10: 'twelve'"
    )
    assert isinstance(failure.value.__cause__, ValueError)
    assert ran == []


def test_tool_failed_in_a_transform_reads_without_the_class_name() -> None:
    def check(value: Any) -> Any:
        raise ToolFailed("the amount must be positive")

    with pytest.raises(WorkflowFailed, match=r"^step 'check' failed: the amount must be positive$"):
        go(pipe(check), -1)


def test_an_agent_failure_stops_the_workflow() -> None:
    ran: list[str] = []
    model = FakeModel([AuthenticationFailed("invalid API key")])
    workflow = pipe(agent_step(make_spec(), adapter=model, label="summarise"), later_step(ran))

    with pytest.raises(WorkflowFailed) as failure:
        go(workflow, "text")

    assert str(failure.value) == (
        "step 'summarise' failed: agent 'helper' ended failed: "
        "AuthenticationFailed: invalid API key"
    )
    assert ran == []


def test_a_failure_inside_a_nested_workflow_names_the_inner_step() -> None:
    def explode(value: Any) -> Any:
        raise RuntimeError("boom")

    ran: list[str] = []
    workflow = pipe(add_one, pipe(double, explode, label="inner"), later_step(ran))
    sink = RecordingSink()

    with pytest.raises(WorkflowFailed) as failure:
        go(workflow, 1, sink=sink)

    assert failure.value.step == "explode"
    assert sink.steps("workflow.step.failed") == ["explode", "inner"]
    assert ran == []


def test_a_failing_parallel_branch_cancels_the_others() -> None:
    started: list[str] = []
    cancelled: list[str] = []
    finished: list[str] = []

    async def slow(value: Any) -> Any:
        started.append("slow")
        try:
            await asyncio.Event().wait()  # nothing sets it: only a cancel ends this branch
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        finished.append("slow")
        return value

    async def broken(value: Any) -> Any:
        await asyncio.sleep(0)  # the slow branch is under way
        raise RuntimeError("no data")

    async def run_and_look() -> list[str]:
        context = WorkflowContext(registry=BUILTINS, ctx=CTX)
        with pytest.raises(WorkflowFailed, match="step 'broken' failed: RuntimeError: no data"):
            await pipe(parallel(slow, broken)).run(1, context)
        return list(cancelled)  # as the failure reaches the caller, before asyncio.run's cleanup

    cancelled_when_raised = asyncio.run(run_and_look())

    assert started == ["slow"] and cancelled_when_raised == ["slow"] and finished == []


# -- events ------------------------------------------------------------------------------
def test_each_step_records_its_input_output_and_timing() -> None:
    async def wait(value: int) -> int:
        await asyncio.sleep(0.05)
        return value

    sink = RecordingSink()
    go(
        pipe(add_one, wait, tool_step("calculator", lambda v: {"expression": f"{v} * 2"})),
        1,
        sink=sink,
    )

    assert [(kind, payload["step"]) for kind, payload in sink.events] == [
        ("workflow.step.started", "add_one"),
        ("workflow.step.completed", "add_one"),
        ("workflow.step.started", "wait"),
        ("workflow.step.completed", "wait"),
        ("workflow.step.started", "calculator"),
        ("workflow.tool.started", "calculator"),  # the call through the tool-call step
        ("workflow.tool.completed", "calculator"),
        ("workflow.step.completed", "calculator"),
    ]
    [called] = sink.of("workflow.tool.started")
    assert (called["name"], called["arguments"]) == ("calculator", {"expression": "2 * 2"})
    assert sink.of("workflow.tool.completed")[0]["result"] == {"result": 4}
    started, completed = sink.of("workflow.step.started"), sink.of("workflow.step.completed")
    assert [p["input"] for p in started] == [1, 2, 2]
    assert [p["output"] for p in completed] == [2, 2, {"result": 4}]
    assert completed[1]["latency_ms"] >= 50
    assert all(isinstance(p["latency_ms"], float) for p in completed)
    json.dumps(sink.events)  # every payload is JSON


def test_a_failed_step_records_its_error() -> None:
    def explode(value: Any) -> Any:
        raise RuntimeError("boom")

    sink = RecordingSink()
    with pytest.raises(WorkflowFailed):
        go(pipe(explode), 1, sink=sink)

    (failed,) = sink.of("workflow.step.failed")
    assert failed["step"] == "explode"
    assert failed["error"] == "step 'explode' failed: RuntimeError: boom"
    assert failed["latency_ms"] >= 0


def test_large_or_non_json_values_are_summarised_and_secrets_redacted() -> None:
    ctx = RunContext(tenant_id=1, secrets=StaticSecrets({"api": "sk-live-123456"}))
    sink = RecordingSink()
    workflow = pipe(
        transform(lambda value: "x" * 5000, label="big"),
        transform(lambda value: {1, 2}, label="a-set"),
        transform(lambda value: {"token": "sk-live-123456"}, label="leaky"),
    )

    go(workflow, None, sink=sink, ctx=ctx)

    big, a_set, leaky = sink.of("workflow.step.completed")
    assert len(big["output"]) == SUMMARY_CHARS + 1
    assert big["output"].endswith("…")
    assert a_set["output"] == "{1, 2}"
    assert leaky["output"] == {"token": REDACTED}
    json.dumps(sink.events)


# -- workflow as tool --------------------------------------------------------------------
def test_an_agent_calls_a_workflow_tool_and_answers_with_its_result() -> None:
    registry = ToolRegistry(BUILTINS)
    for item in EXAMPLE_WORKFLOW_TOOLS:
        registry.register(item)  # as the plug-in, once installed, gives every tenant
    arguments = {"principal": 1000, "annual_rate_percent": 5, "years": 10}
    model = FakeModel(
        [
            ToolCall(id="c1", name="compound_interest", arguments=arguments),
            "After 10 years you will have 1647.01.",
        ]
    )

    outcome = asyncio.run(
        run_agent(spec=make_spec(), adapter=model, registry=registry, ctx=CTX, input="How much?")
    )

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.output == "After 10 years you will have 1647.01."
    assert "compound_interest" in [tool.name for tool in model.requests[0].tools]
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolResultMessage)
    assert not result.is_error
    assert json.loads(result.content)["balance"] == 1647.01


def test_a_failed_workflow_tool_tells_the_model_which_step_failed() -> None:
    async def tenant_registry(ctx: RunContext) -> ToolRegistry:  # resolved per call
        assert ctx.tenant_id == 1
        return BUILTINS

    failing = workflow_tool(
        pipe(tool_step("calculator", lambda value: {"expression": value["expression"]})),
        name="evaluate",
        description="Evaluate an expression in a workflow.",
        input_schema={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
        registry=tenant_registry,
        capability=Capability(effect=Effect.NONE),
    )
    registry = ToolRegistry([failing])
    model = FakeModel(
        [ToolCall(id="c1", name="evaluate", arguments={"expression": "1 +"}), "Sorry."]
    )

    outcome = asyncio.run(
        run_agent(spec=make_spec(), adapter=model, registry=registry, ctx=CTX, input="go")
    )

    assert outcome.status is RunStatus.SUCCEEDED
    result = model.requests[1].messages[-1]
    assert result.is_error
    assert result.content.startswith("step 'calculator' failed: ")


def test_a_tool_step_honours_its_tools_rate_limit() -> None:
    """A workflow's steps call tools through the registry, so their limits hold there too."""
    limited = Tool(
        "lookup",
        "Look something up.",
        ANY_OBJECT,
        lambda arguments, ctx: {"found": True},
        capability=Capability(rate_limit_per_minute=1),
    )
    workflow = workflow_tool(
        pipe(tool_step("lookup")),
        name="look_twice",
        description="Looks up.",
        input_schema=ANY_OBJECT,
        registry=ToolRegistry([limited]),
    )
    ctx = replace(CTX, rate_limiter=MemoryRateLimiter())

    async def twice() -> list:
        return [
            await ToolRegistry([workflow]).execute(ToolCall(f"c{n}", "look_twice", {}), ctx)
            for n in (1, 2)
        ]

    first, second = asyncio.run(twice())

    assert first.result == {"found": True}
    assert second.error == (
        "step 'lookup' failed: tool lookup is limited to 1 calls per minute for this tenant; "
        "try again in 60 s"
    )


def test_a_workflow_tool_does_not_see_itself() -> None:
    shared = ToolRegistry(BUILTINS)
    shared.register(
        workflow_tool(
            pipe(tool_step("again")),
            name="again",
            description="Calls itself.",
            input_schema=ANY_OBJECT,
            registry=lambda ctx: shared,
        )
    )

    result = asyncio.run(shared.execute(ToolCall(id="c1", name="again", arguments={}), CTX))

    assert result.error is not None
    assert result.error.startswith("step 'again' failed: unknown tool 'again'")


def test_workflow_tools_calling_each_other_stop_at_the_first_repeat() -> None:
    shared = ToolRegistry()
    for name, other in (("ping", "pong"), ("pong", "ping")):
        shared.register(
            workflow_tool(
                pipe(tool_step(other)),
                name=name,
                description=f"Calls {other}.",
                input_schema=ANY_OBJECT,
                registry=lambda ctx: shared,
            )
        )

    result = asyncio.run(shared.execute(ToolCall(id="c1", name="ping", arguments={}), CTX))

    assert result.error == (
        "step 'pong' failed: step 'ping' failed: "
        "workflow 'ping' is already running in this call chain"
    )


def test_a_workflow_tool_reports_its_steps_to_the_run_context_events() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = RunContext(tenant_id=1, events=lambda type, payload: events.append((type, payload)))
    (interest,) = EXAMPLE_WORKFLOW_TOOLS
    call = ToolCall(
        id="c1",
        name="compound_interest",
        arguments={"principal": 100, "annual_rate_percent": 10, "years": 2},
    )

    result = asyncio.run(ToolRegistry([interest]).execute(call, ctx))

    assert result.error is None
    steps = [p["step"] for kind, p in events if kind == "workflow.step.completed"]
    assert steps == ["prepare_inputs", "periodic", "choose-compounding", "format_answer"]


# -- the tool-call step -----------------------------------------------------------------
def _pays(executed: list, **capability: Any) -> Tool:
    def pay(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        executed.append(arguments)
        return {"paid": True}

    return Tool("pay", "Pay.", ANY_OBJECT, pay, capability=Capability(**capability))


def _paying_workflow(tool: Tool, **capability: Any) -> Tool:
    return workflow_tool(
        pipe(tool_step("pay")),
        name="settle",
        description="Settles the bill.",
        input_schema=ANY_OBJECT,
        registry=ToolRegistry([tool]),
        capability=Capability(**capability),
    )


FLAGGED_OR_WRITING = [
    "flagged-in-a-read-workflow", "flagged-in-a-write-workflow", "flagged-covered",
    "write-in-a-read-workflow", "write-covered", "read",
]  # fmt: skip


@pytest.mark.parametrize(
    ("step_tool", "workflow", "runs"),
    [
        ({"requires_approval": True}, {}, False),  # nobody to approve mid-workflow
        ({"requires_approval": True}, {"effect": Effect.WRITE}, False),
        ({"requires_approval": True}, {"requires_approval": True}, True),  # approved as a whole
        ({"effect": Effect.WRITE}, {}, False),  # more than the workflow declares
        ({"effect": Effect.WRITE}, {"effect": Effect.WRITE}, True),
        ({"effect": Effect.READ}, {}, True),
    ],
    ids=FLAGGED_OR_WRITING,
)
def test_a_tool_step_runs_only_what_the_workflows_own_approval_covered(
    step_tool: dict[str, Any], workflow: dict[str, Any], runs: bool
) -> None:
    executed: list = []
    settle = _paying_workflow(_pays(executed, **step_tool), **workflow)

    result = asyncio.run(ToolRegistry([settle]).execute(ToolCall("c1", "settle", {"n": 1}), CTX))

    assert executed == ([{"n": 1}] if runs else [])
    if runs:
        assert result.result == {"paid": True}
    else:
        assert result.error == f"step 'pay' failed: {UNATTENDED}"


def test_a_workflow_run_by_itself_refuses_a_tool_that_needs_approval() -> None:
    executed: list = []
    sink = RecordingSink()
    registry = ToolRegistry([_pays(executed, requires_approval=True)])

    with pytest.raises(WorkflowFailed, match="not run: this tool needs approval"):
        go(pipe(tool_step("pay")), {}, registry=registry, sink=sink)

    assert executed == []
    [refused] = sink.of("workflow.tool.completed")  # recorded as the step records a refusal
    assert (refused["step"], refused["error"], refused["latency_ms"]) == ("pay", UNATTENDED, 0)


def test_what_a_tool_step_spent_on_models_counts_for_the_enclosing_call() -> None:
    """The run that called the workflow tool counts its steps' model calls (and the quota
    refusals of them) as that call's, as for any tool that asks a model."""

    def ask(arguments: dict[str, Any], ctx: RunContext) -> str:
        ctx.usage.add(ctx.call_id, ModelTokens("openai", "gpt", 10, 20))
        ctx.usage.refuse(ctx.call_id, {"model": "gpt", "message": "Quota exceeded"})
        return "42"

    asking = workflow_tool(
        pipe(tool_step("ask"), tool_step("ask", lambda answer: {})),
        name="ask_twice",
        description="Asks twice.",
        input_schema=ANY_OBJECT,
        registry=ToolRegistry([Tool("ask", "Ask.", ANY_OBJECT, ask)]),
    )
    events: list[tuple[str, dict[str, Any]]] = []

    async def emit(type: str, payload: dict[str, Any]) -> None:
        events.append((type, payload))

    state = RunState()
    outer = ToolCallStep(
        registry=ToolRegistry([asking]),
        ctx=replace(CTX, usage=UsageMeter()),
        emit=emit,
        checkpoint=NoCheckpoint(),
        approval=ApprovalRule(),
    )
    asyncio.run(outer.run(state, [ToolCall("c1", "ask_twice", {})]))

    assert state.usage == Usage(20, 40)
    [usage] = [payload for kind, payload in events if kind == "tool.usage"]
    assert usage["call_id"] == "c1" and len(usage["models"]) == 2
    refused = [payload for kind, payload in events if kind == "tool.quota_exceeded"]
    assert [(r["call_id"], r["name"], r["model"]) for r in refused] == [
        ("c1", "ask_twice", "gpt"), ("c1", "ask_twice", "gpt")
    ]  # fmt: skip


# -- the example workflow ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "balance", "interest"),
    [
        ({"principal": 1000, "annual_rate_percent": 5, "years": 10}, 1647.01, 647.01),
        (
            {"principal": 1000, "annual_rate_percent": 5, "years": 10, "compounding": "yearly"},
            1628.89,
            628.89,
        ),
        (
            {"principal": 1000, "annual_rate_percent": 5, "years": 10, "compounding": "continuous"},
            1648.72,
            648.72,
        ),
        ({"principal": 500, "annual_rate_percent": 0, "years": 3}, 500, 0),
    ],
)
def test_the_compound_interest_tool_computes_the_balance(
    arguments: dict[str, Any], balance: float, interest: float
) -> None:
    (interest_tool,) = EXAMPLE_WORKFLOW_TOOLS
    registry = ToolRegistry([interest_tool])

    result = asyncio.run(
        registry.execute(ToolCall(id="c1", name="compound_interest", arguments=arguments), CTX)
    )

    assert result.error is None
    assert result.result["balance"] == pytest.approx(balance)
    assert result.result["interest_earned"] == pytest.approx(interest)


def test_the_compound_interest_tool_names_the_step_that_overflows() -> None:
    arguments = {"principal": 1e15, "annual_rate_percent": 1000, "years": 1000}

    with pytest.raises(WorkflowFailed, match="step 'periodic' failed: number is too large"):
        go(compound_interest, arguments)


def test_the_example_tools_have_provider_definitions() -> None:
    registry = ToolRegistry(EXAMPLE_WORKFLOW_TOOLS)

    for format in ("openai", "anthropic", "gemini", "mcp"):
        assert len(registry.definitions(format)) == 1
    (interest_tool,) = EXAMPLE_WORKFLOW_TOOLS
    assert interest_tool.capability.effect is Effect.NONE
    assert "workflow" in interest_tool.tags
