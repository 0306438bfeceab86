"""The "remote" agent kind (agents/runtime/remote.py) against a local server that speaks the
protocol over real HTTP through the guarded egress. No database."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agents.runtime import remote, remote_transport
from agents.runtime.crew import Suspended
from agents.runtime.kinds import get_kind
from agents.runtime.remote import remote_agent
from agents.runtime.remote_transport import http_health as remote_health
from agents.runtime.spec import AgentSpec, Decision, RunOutcome, RunStatus
from agents.runtime.state import RunState
from agents.runtime.tool_step import UNKNOWN_OUTCOME
from providers.runtime.types import AssistantMessage, ToolResultMessage, UserMessage
from tests.fakes.remote_agent_server import (
    RemoteAgentServer,
    Reply,
    call,
    error,
    response,
    tool_call,
)
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext, StaticSecrets
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")
TOKEN = "rt-s3cret-token-value"


class RecordingSink:
    wants_text_deltas = False

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.events.append((type, payload))

    def types(self) -> list[str]:
        return [t for t, _ in self.events]

    def last(self, type: str) -> dict[str, Any]:
        return [p for t, p in self.events if t == type][-1]


class RecordingCheckpoint:
    def __init__(self) -> None:
        self.saves: list[tuple[str, RunState]] = []

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        self.saves.append((reason, RunState.from_dict(state.to_dict())))


@pytest.fixture
def server() -> Iterator[RemoteAgentServer]:
    with RemoteAgentServer() as srv:
        yield srv


def loopback_egress() -> GuardedHttpClient:
    return GuardedHttpClient(EgressPolicy(allowlist=("127.0.0.1/32",)))


def make_spec(url: str, **overrides: Any) -> AgentSpec:
    fields: dict[str, Any] = {
        "name": "remote-helper",
        "instructions": "Be brief.",
        "model": "remote",
        "kind": "remote",
        "remote_url": url,
        "tool_names": ("calculator", "think"),
    }
    return AgentSpec(**{**fields, **overrides})


def run(
    url: str,
    *,
    registry: ToolRegistry = BUILTINS,
    ctx: RunContext = CTX,
    egress: GuardedHttpClient | None = None,
    sink: RecordingSink | None = None,
    **kwargs: Any,
) -> RunOutcome:
    spec_overrides = kwargs.pop("spec", {})
    return asyncio.run(
        remote_agent(
            spec=make_spec(url, **spec_overrides),
            registry=registry,
            ctx=ctx,
            egress=egress or loopback_egress(),
            input=kwargs.pop("input", "What is 2+2?"),
            sink=sink,
            **kwargs,
        )
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def flagged_tool(calls: list[dict], **capability: Any) -> Tool:
    async def handler(arguments: dict, ctx: RunContext) -> dict:
        calls.append(arguments)
        return {"done": True}

    return Tool(
        name="delete_invoice",
        description="Delete an invoice.",
        input_schema={"type": "object", "properties": {"id": {"type": "integer"}}},
        handler=handler,
        capability=Capability(**capability),
    )


# -- the protocol ------------------------------------------------------------------------
def test_a_plain_response_is_the_runs_output(server):
    server.script(response("Four.", usage={"input_tokens": 12, "output_tokens": 3}))
    sink = RecordingSink()

    outcome = run(server.url, sink=sink)

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.output == "Four."
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (12, 3)
    [query] = server.queries
    assert query["type"] == "query"
    assert query["protocol"] == 1
    assert query["run_id"] == "run_1"
    assert query["input"] == "What is 2+2?"
    assert query["history"] == []
    assert query["state"] is None
    assert [t["function"]["name"] for t in query["tools"]] == ["calculator", "think"]
    assert sink.types() == ["run.started", "inference.started", "inference.completed",
                            "run.completed"]  # fmt: skip
    completed = sink.last("run.completed")
    assert completed["status"] == "succeeded"
    assert completed["output"] == "Four."
    assert completed["usage"]["input_tokens"] == 12


def test_the_conversation_history_is_sent_as_role_and_text(server):
    history = [UserMessage("Hi, I'm Ada."), AssistantMessage(text="Hello Ada!")]

    run(server.url, history=history)

    assert server.queries[0]["history"] == [
        {"role": "user", "text": "Hi, I'm Ada."},
        {"role": "assistant", "text": "Hello Ada!"},
    ]


def test_a_tool_call_runs_locally_and_its_result_goes_back_with_the_state(server):
    opaque = {"step": 1, "memo": ["a", {"b": None}]}
    server.script(
        tool_call([call("c1", "calculator", {"expression": "2+2"})], state=opaque),
        response("It is 4."),
    )
    sink = RecordingSink()
    checkpoint = RecordingCheckpoint()

    outcome = run(server.url, sink=sink, checkpoint=checkpoint)

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.output == "It is 4."
    first, second = server.queries
    assert first["type"] == "query"
    assert second["type"] == "tool_result"
    assert second["protocol"] == 1
    assert second["run_id"] == "run_1"
    assert second["state"] == opaque
    [result] = second["results"]
    assert result["call_id"] == "c1"
    assert result["name"] == "calculator"
    assert result["is_error"] is False
    assert json.loads(result["content"]) == {"result": 4}
    started, completed = sink.last("tool.started"), sink.last("tool.completed")
    assert started == {"call_id": "c1", "name": "calculator", "arguments": {"expression": "2+2"}}
    assert completed["result"] == {"result": 4}
    assert completed["error"] is None
    assert sink.last("run.completed")["rounds"] == 2
    reason, state = checkpoint.saves[-1]
    assert reason == "finished"
    assert [type(m) for m in state.messages] == [
        UserMessage,
        AssistantMessage,
        ToolResultMessage,
        AssistantMessage,
    ]
    assert state.messages[1].tool_calls[0].name == "calculator"
    assert state.messages[-1].text == "It is 4."
    assert state.tool_calls == 1


def test_several_calls_run_concurrently_and_come_back_in_call_order(server):
    server.script(
        tool_call(
            [
                call("a", "calculator", {"expression": "1+1"}),
                call("b", "think", {"thought": "hmm"}),
                call("c", "calculator", {"expression": "1/0"}),
            ],
            state="s1",
        ),
        response("done"),
    )

    outcome = run(server.url)

    assert outcome.status is RunStatus.SUCCEEDED
    results = server.queries[1]["results"]
    assert [r["call_id"] for r in results] == ["a", "b", "c"]
    assert [r["is_error"] for r in results] == [False, False, True]
    assert server.queries[1]["state"] == "s1"


def test_tools_outside_the_agents_selection_are_not_run(server):
    server.script(
        tool_call([call("c1", "current_time", {"timezone": "UTC"})]),
        response("ok"),
    )

    run(server.url)

    [result] = server.queries[1]["results"]
    assert result["is_error"] is True
    assert "unknown tool 'current_time'" in result["content"]


def test_a_call_for_final_answer_gives_the_structured_output(server):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    server.script(tool_call([call("f1", "final_answer", {"answer": 4})]))

    outcome = run(server.url, spec={"output_schema": schema})

    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.structured_output == {"answer": 4}
    assert json.loads(outcome.output) == {"answer": 4}
    assert len(server.queries) == 1
    assert "final_answer" in [t["function"]["name"] for t in server.queries[0]["tools"]]


# -- authentication ------------------------------------------------------------------------
def test_the_bearer_token_is_sent_when_configured_and_kept_out_of_events():
    with RemoteAgentServer(expect_token=TOKEN) as server:
        server.script(
            tool_call([call("c1", "calculator", {"expression": "2+2"})], state=None),
            response("4"),
        )
        sink = RecordingSink()
        ctx = RunContext(tenant_id=1, run_id="run_1", secrets=StaticSecrets({
            "agent:remote_token": TOKEN}))  # fmt: skip

        outcome = run(server.url, ctx=ctx, sink=sink)

    assert outcome.status is RunStatus.SUCCEEDED
    assert [r.headers["authorization"] for r in server.received] == [f"Bearer {TOKEN}"] * 2
    assert TOKEN not in json.dumps(sink.events)
    assert all(TOKEN not in json.dumps(q) for q in server.queries)


def test_no_authorization_header_is_sent_without_a_token(server):
    run(server.url)

    assert "authorization" not in server.received[0].headers


def test_a_token_the_server_echoes_in_an_error_is_redacted():
    with RemoteAgentServer(error(f"bad token {TOKEN}")) as server:
        sink = RecordingSink()
        ctx = RunContext(tenant_id=1, secrets=StaticSecrets({"agent:remote_token": TOKEN}))

        outcome = run(server.url, ctx=ctx, sink=sink)

    assert outcome.status is RunStatus.FAILED
    assert TOKEN not in outcome.error
    assert TOKEN not in json.dumps(sink.events)


# -- failures ----------------------------------------------------------------------------
def test_the_servers_error_fails_the_run_with_its_message(server):
    server.script(error("the knowledge base is offline"))
    sink = RecordingSink()

    outcome = run(server.url, sink=sink)

    assert outcome.status is RunStatus.FAILED
    assert outcome.error == "remote agent error: the knowledge base is offline"
    assert sink.last("run.failed")["error"] == outcome.error
    assert sink.last("run.failed")["status"] == "failed"


def test_a_non_2xx_answer_fails_naming_the_status(server):
    server.script(Reply({"message": "overloaded"}, status=503))

    outcome = run(server.url)

    assert outcome.status is RunStatus.FAILED
    assert outcome.error == "remote agent answered HTTP 503: overloaded"


def test_a_non_2xx_answer_without_a_body_still_names_the_status(server):
    server.script(Reply(body=b"", status=502, content_type="text/plain"))

    outcome = run(server.url)

    assert outcome.error == "remote agent answered HTTP 502"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(body=b"<html>oops</html>", content_type="text/html"), "invalid JSON (HTTP 200)"),
        ([1, 2], "not a JSON object"),
        ({"type": "thinking"}, "unknown reply type 'thinking'"),
        ({"type": "response"}, "response without text"),
        ({"type": "tool_call", "calls": []}, "tool_call without calls"),
        ({"type": "tool_call", "calls": [{"name": "think"}]}, "unique string id"),
    ],
)
def test_an_off_protocol_answer_fails_the_run(server, reply, expected):
    server.script(reply if isinstance(reply, Reply) else Reply(json=reply))

    outcome = run(server.url)

    assert outcome.status is RunStatus.FAILED
    assert expected in outcome.error
    assert outcome.error.startswith("remote agent ")


def test_an_unreachable_server_fails_the_run():
    outcome = run(f"http://127.0.0.1:{closed_port()}/agent")

    assert outcome.status is RunStatus.FAILED
    assert outcome.error.startswith("remote agent unreachable: cannot connect to 127.0.0.1")


def test_a_destination_not_allow_listed_is_refused_by_egress(server):
    outcome = run(server.url, egress=GuardedHttpClient(EgressPolicy()))

    assert outcome.status is RunStatus.FAILED
    assert "destination 127.0.0.1 is not allowed (loopback)" in outcome.error
    assert server.received == []


def test_a_slow_server_times_out(server, monkeypatch):
    monkeypatch.setattr(remote_transport, "REQUEST_TIMEOUT_S", 0.3)
    server.script(Reply(response("late"), delay_s=1.0))

    outcome = run(server.url)

    assert outcome.status is RunStatus.FAILED
    assert outcome.error.startswith("remote agent did not answer in time")


def test_an_agent_without_a_url_fails_with_a_configuration_message():
    outcome = run("")

    assert outcome.status is RunStatus.FAILED
    assert "neither a URL nor a command" in outcome.error


def test_a_run_resumed_before_its_calls_ran_runs_them_and_sends_their_results(server):
    server.script(tool_call([call("c1", "calculator", {"expression": "2+2"})], state={"n": 1}))
    checkpoint = RecordingCheckpoint()
    run(server.url, checkpoint=checkpoint)
    # The worker died right after saving the agent's answer: the calls are still to run.
    [saved] = [s for reason, s in checkpoint.saves if reason == "model_response"][:1]
    assert saved.pending_calls and saved.remote["state"] == {"n": 1}
    server.script(response("4"))

    outcome = run(server.url, state=saved)

    assert outcome.status is RunStatus.SUCCEEDED and outcome.output == "4"
    resent = server.queries[-1]
    assert resent["type"] == "tool_result" and resent["state"] == {"n": 1}
    assert json.loads(resent["results"][0]["content"]) == {"result": 4}


def test_a_run_resumed_after_its_calls_ran_sends_the_owed_results_again(server):
    executed: list[dict] = []
    registry = ToolRegistry([flagged_tool(executed)])
    server.script(
        tool_call([call("d1", "delete_invoice", {"id": 7})], state="s"), Reply(status=503)
    )
    checkpoint = RecordingCheckpoint()
    outcome = run(server.url, registry=registry, spec={"tool_names": None}, checkpoint=checkpoint)
    assert outcome.status is RunStatus.FAILED and executed == [{"id": 7}]
    # The results were saved as owed before the (failed) send: a new worker sends them.
    [owed] = [s for reason, s in checkpoint.saves if reason == "tool_result"][-1:]
    server.script(response("deleted"))

    outcome = run(server.url, registry=registry, spec={"tool_names": None}, state=owed)

    assert outcome.status is RunStatus.SUCCEEDED
    assert executed == [{"id": 7}]  # never run twice
    assert server.queries[-1]["results"][0]["call_id"] == "d1"


def test_a_call_interrupted_while_running_is_not_repeated_on_resume(server):
    executed: list[dict] = []
    registry = ToolRegistry([flagged_tool(executed, idempotent=False)])
    state = RunState(
        messages=[UserMessage("hi")],
        pending_calls=[remote.ToolCall("d1", "delete_invoice", {"id": 7})],
        started={"d1"},
        rounds=1,
        remote={"state": "s", "owed": None},
    )
    server.script(response("checked"))

    outcome = run(server.url, registry=registry, spec={"tool_names": None}, state=state)

    assert outcome.status is RunStatus.SUCCEEDED and executed == []
    assert server.queries[-1]["results"][0]["content"] == UNKNOWN_OUTCOME


# -- limits ------------------------------------------------------------------------------
def test_max_rounds_bounds_the_exchanges(server):
    server.handler = lambda body: tool_call(
        [call(f"c{len(server.queries)}", "calculator", {"expression": "1+1"})], state="again"
    )
    sink = RecordingSink()

    outcome = run(server.url, spec={"max_rounds": 3}, sink=sink)

    assert outcome.status is RunStatus.MAX_ROUNDS
    assert outcome.error == "stopped after 3 rounds"
    assert len(server.queries) == 3
    assert sink.types().count("tool.started") == 2  # the last round's calls are not run
    assert sink.last("run.completed")["status"] == "max_rounds"


def test_the_tool_call_limit_is_enforced(server):
    server.script(
        tool_call(
            [
                call("a", "calculator", {"expression": "1+1"}),
                call("b", "calculator", {"expression": "2+2"}),
            ]
        ),
        response("ok"),
    )

    outcome = run(server.url, spec={"max_tool_calls": 1})

    assert outcome.status is RunStatus.SUCCEEDED
    first, second = server.queries[1]["results"]
    assert first["is_error"] is False
    assert second["is_error"] is True
    assert "tool call limit (1)" in second["content"]


def test_the_token_budget_is_enforced(server):
    server.script(response("long", usage={"input_tokens": 90, "output_tokens": 20}))

    outcome = run(server.url, spec={"max_tokens_per_run": 100})

    assert outcome.status is RunStatus.FAILED
    assert outcome.error == "token budget of 100 exceeded (110)"


def test_a_cancelled_run_stops_between_exchanges(server):
    server.handler = lambda body: tool_call([call("c1", "think", {"thought": "x"})])
    checks = 0

    async def is_cancelled() -> bool:
        nonlocal checks
        checks += 1
        return checks > 3  # checked before each POST and before running each answer's tools

    sink = RecordingSink()
    outcome = run(server.url, is_cancelled=is_cancelled, sink=sink)

    assert outcome.status is RunStatus.CANCELLED
    assert len(server.queries) == 2
    assert sink.types().count("tool.started") == 1
    assert sink.types()[-1] == "run.cancelled"


@pytest.mark.parametrize(
    ("capability", "policy"),
    [
        ({"requires_approval": True, "effect": Effect.READ}, "flagged"),
        ({"effect": Effect.DESTRUCTIVE}, "writes"),
    ],
)
def test_tools_that_need_approval_park_the_run_until_decided(server, capability, policy):
    executed: list[dict] = []
    registry = ToolRegistry([flagged_tool(executed, **capability)])
    server.script(tool_call([call("d1", "delete_invoice", {"id": 7})], state={"k": 1}))
    sink, checkpoint = RecordingSink(), RecordingCheckpoint()
    spec = {"tool_names": None, "approval_policy": policy}

    parked = run(server.url, registry=registry, sink=sink, spec=spec, checkpoint=checkpoint)

    assert parked.status is RunStatus.AWAITING_APPROVAL
    assert [c.id for c in parked.awaiting] == ["d1"] and executed == []
    assert sink.last("approval.required")["name"] == "delete_invoice"
    assert len(server.queries) == 1  # nothing sent back while it waits
    saved = checkpoint.saves[-1][1].to_dict()

    server.script(response("Deleted."))
    decided = {"d1": Decision(approved=True, by="alice")}
    resumed = RunState.from_dict(saved)
    outcome = run(server.url, registry=registry, spec=spec, state=resumed, decisions=decided)

    assert outcome.status is RunStatus.SUCCEEDED and executed == [{"id": 7}]
    [result] = server.queries[-1]["results"]
    assert result["is_error"] is False and server.queries[-1]["state"] == {"k": 1}

    server.script(response("Not deleted."))
    refused = {"d1": Decision(approved=False, by="alice", reason="keep it")}
    run(
        server.url, registry=registry, spec=spec, state=RunState.from_dict(saved), decisions=refused
    )
    assert server.queries[-1]["results"][0]["content"] == "rejected by alice: keep it"
    assert executed == [{"id": 7}]


def test_a_delegation_whose_member_waits_for_a_human_parks_the_run(server):
    async def delegate(arguments: dict, ctx: RunContext) -> Suspended:
        return Suspended("writer is waiting for an approval", child_run_id=9)

    registry = ToolRegistry(
        [Tool("delegate_to_writer", "Ask the writer.", {"type": "object"}, delegate)]
    )
    server.script(tool_call([call("w1", "delegate_to_writer", {})]))

    outcome = run(server.url, registry=registry, spec={"tool_names": None})

    assert outcome.status is RunStatus.AWAITING_APPROVAL
    assert [c.id for c in outcome.suspended] == ["w1"]
    assert len(server.queries) == 1


def test_with_the_never_policy_flagged_tools_run(server):
    executed: list[dict] = []
    registry = ToolRegistry([flagged_tool(executed, requires_approval=True)])
    server.script(tool_call([call("d1", "delete_invoice", {"id": 7})]), response("deleted"))

    run(server.url, registry=registry, spec={"tool_names": None, "approval_policy": "never"})

    assert executed == [{"id": 7}]


# -- health ------------------------------------------------------------------------------
def test_health_is_ok_when_the_server_says_so(server):
    assert asyncio.run(remote_health(server.url, loopback_egress())) == (True, "ok")
    assert server.received[0].method == "GET"
    assert server.received[0].path == "/agent/health"


def test_health_sends_the_token_when_given():
    with RemoteAgentServer(expect_token=TOKEN) as server:
        healthy, _ = asyncio.run(remote_health(server.url, loopback_egress(), token=TOKEN))
        refused, why = asyncio.run(remote_health(server.url, loopback_egress()))

    assert healthy is True
    assert (refused, why) == (False, "remote agent answered HTTP 401: unauthorized")


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        (Reply({"status": "ok"}, status=503), "remote agent answered HTTP 503"),
        ({"status": "degraded"}, "health status is 'degraded', not 'ok'"),
        (Reply(body=b"fine", content_type="text/plain"), "health answer is not JSON (HTTP 200)"),
        (Reply(body=b"[" * 60_000), "health answer is not JSON (HTTP 200)"),  # (too deep)
    ],
)
def test_health_fails_on_a_bad_answer(server, health, expected):
    server.health = health

    healthy, why = asyncio.run(remote_health(server.url, loopback_egress()))

    assert healthy is False
    assert why == expected


def test_health_fails_when_unreachable_or_refused(server):
    unreachable = asyncio.run(
        remote_health(f"http://127.0.0.1:{closed_port()}/agent", loopback_egress())
    )
    refused = asyncio.run(remote_health(server.url, GuardedHttpClient(EgressPolicy())))

    assert unreachable[0] is False
    assert unreachable[1].startswith("remote agent unreachable")
    assert refused[0] is False
    assert "not allowed (loopback)" in refused[1]


def test_the_health_url_is_the_agent_url_plus_health():
    assert remote.health_url("https://a.example/agent/") == "https://a.example/agent/health"
    assert remote.health_url("https://a.example") == "https://a.example/health"
    assert remote.health_url("https://a.example/x?v=1#f") == "https://a.example/x/health?v=1"


# -- registration ------------------------------------------------------------------------
def test_the_remote_kind_is_registered():
    assert get_kind("remote") is remote_agent
