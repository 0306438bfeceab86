from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest

from tools.runtime.context import RunContext, StaticSecrets
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.registry import ToolFailed, ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall, tool

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")


def run(coro):
    return asyncio.run(coro)


def make(name: str, tags=(), handler=None, schema=None, **capability) -> Tool:
    async def echo(arguments, ctx):
        return {"echo": arguments}

    return Tool(
        name=name,
        description=f"{name} tool",
        input_schema=schema or {"type": "object", "properties": {"x": {"type": "integer"}}},
        handler=handler or echo,
        tags=frozenset(tags),
        capability=Capability(**capability),
    )


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            make("search", tags={"read", "web"}),
            make("fetch", tags={"read", "web"}),
            make("delete_file", tags={"files"}, effect=Effect.DESTRUCTIVE),
            make("write_file", tags={"files"}, effect=Effect.WRITE),
        ]
    )


def test_register_get_has_names(registry):
    assert registry.names() == ["search", "fetch", "delete_file", "write_file"]
    assert registry.has("search") and not registry.has("nope")
    assert registry.get("fetch").name == "fetch"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(make("search"))
    with pytest.raises(KeyError, match="did you mean search"):
        registry.get("serch")


def test_filter_by_names_tags_and_exclude_returns_a_new_registry(registry):
    assert registry.filter(names=["search", "nope"]).names() == ["search"]
    assert registry.filter(tags=["files"]).names() == ["delete_file", "write_file"]
    assert registry.filter(names=["search"], tags=["files"]).names() == [
        "search",
        "delete_file",
        "write_file",
    ]
    assert registry.filter(tags=["web"], exclude=["fetch"]).names() == ["search"]
    assert registry.filter(exclude=["delete_file"]).names() == ["search", "fetch", "write_file"]
    assert registry.filter(names=[]).names() == []
    filtered = registry.filter(tags=["web"])
    filtered.register(make("extra"))
    assert not registry.has("extra")


def test_tool_names_and_schemas_are_checked_when_made():
    with pytest.raises(ValueError, match="must match"):
        make("has space")
    with pytest.raises(ValueError, match="must match"):
        make("x" * 65)
    with pytest.raises(ValueError, match="not valid JSON Schema"):
        make("bad", schema={"type": "object", "properties": {"x": {"type": "integr"}}})
    with pytest.raises(ValueError, match='"type": "object"'):
        make("bad", schema={"type": "string"})


def test_execute_returns_result_with_latency(registry):
    started = time.perf_counter()
    result = run(registry.execute(ToolCall("c1", "search", {"x": 1}), CTX))
    around_ms = (time.perf_counter() - started) * 1000
    assert result.result == {"echo": {"x": 1}}
    assert result.error is None and result.call_id == "c1" and result.name == "search"
    assert 0 < result.latency_ms <= around_ms  # the call's own time, within the caller's


def test_invalid_arguments_become_an_error_the_model_can_act_on(registry):
    result = run(registry.execute(ToolCall("c1", "search", {"x": "one"}), CTX))
    assert result.error == "invalid arguments: x: expected integer, got string"
    result = run(registry.execute(ToolCall("c1", "search", ["x"]), CTX))
    assert result.error == "arguments must be a JSON object"


def test_unknown_tool_lists_close_names(registry):
    result = run(registry.execute(ToolCall("c1", "serch", {}), CTX))
    assert result.error.startswith("unknown tool 'serch'; did you mean search")
    result = run(registry.execute(ToolCall("c1", "zzz", {}), CTX))
    assert "available tools: delete_file, fetch, search, write_file" in result.error


def test_handler_exceptions_become_error_results(caplog):
    async def broken(arguments, ctx):
        raise RuntimeError("disk on fire")

    def refuses(arguments, ctx):
        raise ToolFailed("quota exceeded; try tomorrow")

    registry = ToolRegistry([make("broken", handler=broken), make("refuses", handler=refuses)])
    first = run(registry.execute(ToolCall("c1", "broken", {}), CTX))
    # An exception nobody wrote for the model: a generic message, the details in the log.
    assert first.error.startswith("the tool failed unexpectedly")
    assert "disk on fire" not in first.error and "disk on fire" in caplog.text
    second = run(registry.execute(ToolCall("c2", "refuses", {}), CTX))
    assert second.error == "quota exceeded; try tomorrow"


def test_async_and_sync_handlers_are_bounded_by_their_timeout():
    released = threading.Event()  # the hung sync handler's thread, let go at the end

    async def hung_async(arguments, ctx):
        await asyncio.Event().wait()  # nothing sets it

    def hung_sync(arguments, ctx):
        released.wait(60)

    registry = ToolRegistry(
        [
            make("hung_async", handler=hung_async, timeout_s=0.05),
            make("hung_sync", handler=hung_sync, timeout_s=0.05),
        ]
    )
    try:
        for name in ("hung_async", "hung_sync"):
            started = time.perf_counter()
            result = run(registry.execute(ToolCall("c", name, {}), CTX))
            assert result.error == "timed out after 0.05 s"
            # The point is the timeout: back long before the handler would be (never / 60 s),
            # with 100 times the 0.05 s to spare on a busy machine.
            assert time.perf_counter() - started < 5
    finally:
        released.set()


def test_sync_handlers_run_off_the_event_loop():
    seen = {}

    def where(arguments, ctx):
        seen["thread"] = threading.current_thread() is threading.main_thread()
        return "ok"

    run(ToolRegistry([make("where", handler=where)]).execute(ToolCall("c", "where", {}), CTX))
    assert seen["thread"] is False


def test_execute_all_keeps_order_and_runs_concurrently():
    # Each call finishes only after the next one has: c0 after c1, c1 after c2, c2 after c4.
    # So they finish in reverse order, and only if they run at once: one at a time, c0
    # would wait for a call not started yet and give up (after 10 s), answering "alone".
    after = {"c0": "c1", "c1": "c2", "c2": "c4", "c4": None}
    finished = {call_id: threading.Event() for call_id in after}
    finishing_order: list[str] = []

    def finish(ctx, value):
        finishing_order.append(ctx.call_id)
        finished[ctx.call_id].set()
        return value

    async def waiting(arguments, ctx):  # on the loop
        later = after[ctx.call_id]
        for _ in range(1000):
            if later is None or finished[later].is_set():
                return finish(ctx, arguments["x"])
            await asyncio.sleep(0.01)
        return finish(ctx, "alone")

    def blocking(arguments, ctx):  # in a thread
        later = after[ctx.call_id]
        in_turn = later is None or finished[later].wait(10)
        return finish(ctx, arguments["x"] if in_turn else "alone")

    registry = ToolRegistry([make("waiting", handler=waiting), make("blocking", handler=blocking)])
    calls = [ToolCall(f"c{i}", name, {"x": x}) for i, (name, x) in enumerate(
        [("waiting", 300), ("blocking", 200), ("waiting", 100), ("nope", 0), ("blocking", 250)]
    )]  # fmt: skip
    results = run(registry.execute_all(calls, CTX))
    assert finishing_order == ["c4", "c2", "c1", "c0"]
    assert [r.call_id for r in results] == ["c0", "c1", "c2", "c3", "c4"]
    assert [r.result for r in results] == [300, 200, 100, None, 250]
    assert results[3].error.startswith("unknown tool")


def test_handlers_get_the_server_context_with_their_call_id():
    seen = {}

    async def who(arguments, ctx):
        seen.update(tenant=ctx.tenant_id, user=ctx.user_id, run=ctx.run_id, call=ctx.call_id)

    run(ToolRegistry([make("who", handler=who)]).execute(ToolCall("call_9", "who", {}), CTX))
    assert seen == {"tenant": 1, "user": 7, "run": "run_1", "call": "call_9"}


def test_events_are_emitted_and_secrets_redacted_from_them_and_results(caplog):
    events = []

    async def leaky(arguments, ctx):
        raise RuntimeError(f"auth failed for token {ctx.secrets.get('k')}")

    async def echo_secret(arguments, ctx):
        return {"header": f"Bearer {ctx.secrets.get('k')}"}

    ctx = RunContext(
        tenant_id=1,
        secrets=StaticSecrets({"k": "sk-live-XYZ"}),
        events=lambda kind, data: events.append((kind, data)),
    )
    registry = ToolRegistry(
        [make("leaky", handler=leaky), make("echo_secret", handler=echo_secret)]
    )
    failed = run(registry.execute(ToolCall("c1", "leaky", {"x": 1}), ctx))
    echoed = run(registry.execute(ToolCall("c2", "echo_secret", {}), ctx))
    assert failed.error.startswith("the tool failed unexpectedly")
    assert "auth failed for token [redacted]" in caplog.text
    assert "sk-live-XYZ" not in caplog.text
    assert echoed.result == {"header": "Bearer [redacted]"}
    assert [kind for kind, _ in events] == ["tool.started", "tool.completed"] * 2
    assert "sk-live-XYZ" not in repr(events)
    assert events[1][1]["error"] == failed.error and events[1][1]["latency_ms"] >= 0


def test_the_tool_decorator_builds_schema_and_validates_strictly():
    @tool(tags={"demo"}, capability=Capability(effect=Effect.NONE))
    def forecast(city: str, days: int = 1, ctx: RunContext = None) -> dict:
        """Weather forecast for a city."""
        return {"city": city, "days": days, "tenant": ctx.tenant_id}

    assert forecast.description == "Weather forecast for a city."
    assert forecast.input_schema == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
        "required": ["city"],
        "additionalProperties": False,
    }
    registry = ToolRegistry([forecast])
    ok = run(registry.execute(ToolCall("c", "forecast", {"city": "Oslo"}), CTX))
    assert ok.result == {"city": "Oslo", "days": 1, "tenant": 1}
    bad = run(registry.execute(ToolCall("c", "forecast", {"city": "Oslo", "days": "2"}), CTX))
    assert bad.error.startswith("invalid arguments: days:")
    extra = run(registry.execute(ToolCall("c", "forecast", {"city": "Oslo", "ctx": 1}), CTX))
    assert extra.error.startswith("invalid arguments: ctx:")


# -- prepared requests (HTTP tools: tests/tools/test_http_tool.py) --------------------------
class _Recorder:
    """A preparer that records what it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[PreparedRequest] = []

    def prepare(self, arguments, ctx):
        body = f'{{"x":{arguments["x"]},"key":"{ctx.secrets.get("k")}"}}'
        return PreparedRequest("POST", "https://api.example/x", (("X-Call", ctx.call_id),), body)

    async def send(self, request, ctx):
        self.sent.append(request)
        return "sent"


def test_prepare_validates_masks_secrets_and_sends_nothing():
    recorder = _Recorder()
    item = Tool(
        name="post", description="Post.", handler=lambda a, c: None, preparer=recorder,
        input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
    )  # fmt: skip
    registry = ToolRegistry([item, make("plain")])
    ctx = RunContext(tenant_id=1, secrets=StaticSecrets({"k": "s3cr3t-value"}))
    prepared = registry.prepare(ToolCall("c1", "post", {"x": 1}), ctx)
    assert prepared.body == '{"x":1,"key":"[redacted]"}' and prepared.headers == (("X-Call", "c1"),)
    with pytest.raises(ToolFailed, match="invalid arguments"):
        registry.prepare(ToolCall("c1", "post", {"x": "one"}), ctx)
    with pytest.raises(ToolFailed, match="does not send a request"):
        registry.prepare(ToolCall("c1", "plain", {}), ctx)
    assert recorder.sent == []

    result = run(registry.execute(ToolCall("c1", "post", {"x": 1}, prepared=prepared), ctx))
    assert result.result == "sent" and recorder.sent == [prepared]
    gone = run(registry.execute(ToolCall("c1", "plain", {}, prepared=prepared), ctx))
    assert gone.error == "plain no longer sends prepared requests; nothing was sent"


class _Broken:
    """A preparer that fails in a way nobody wrote for the model, quoting a secret."""

    def prepare(self, arguments, ctx):
        raise RuntimeError(f"template broke on {ctx.secrets.get('k')}")

    async def send(self, request, ctx):
        raise AssertionError("never sent")


def test_a_preparer_failing_unexpectedly_gives_the_generic_error_and_logs_it(caplog):
    item = Tool(
        name="post", description="Post.", handler=lambda a, c: None, preparer=_Broken(),
        input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
    )  # fmt: skip
    ctx = RunContext(tenant_id=1, run_id="run_1", secrets=StaticSecrets({"k": "s3cr3t-value"}))
    with pytest.raises(ToolFailed) as failed:
        ToolRegistry([item]).prepare(ToolCall("c1", "post", {"x": 1}), ctx)
    assert str(failed.value) == (
        "the tool failed unexpectedly (run run_1); the details are in the server log"
    )
    # The operator's line: what failed, where, and the traceback with the secret masked.
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        "preparing the request of tool post failed (tenant 1, run run_1, call c1):\n"
    )
    assert "Traceback (most recent call last):\n  File " in caplog.text
    assert "RuntimeError: template broke on [redacted]" in caplog.text
    assert "s3cr3t-value" not in caplog.text


def test_a_validator_failing_unexpectedly_is_an_error_not_a_crash(caplog):
    def validate(arguments):
        raise RuntimeError("validator bug")

    item = Tool(
        name="post", description="Post.", handler=lambda a, c: None, preparer=_Recorder(),
        input_schema={"type": "object"}, validate=validate,
    )  # fmt: skip
    registry = ToolRegistry([item])
    message = "the tool failed unexpectedly (run run_1); the details are in the server log"
    with pytest.raises(ToolFailed, match=r"^the tool failed unexpectedly \(run run_1\)"):
        registry.prepare(ToolCall("c1", "post", {}), CTX)
    assert run(registry.execute(ToolCall("c2", "post", {}), CTX)).error == message
    [line] = [r.getMessage() for r in caplog.records if "call c2" in r.getMessage()]
    assert line.startswith("validating the arguments of tool post failed (tenant 1, run run_1")
    assert line.endswith("RuntimeError: validator bug\n")


def test_an_unexpected_failure_outside_a_run_names_no_run(caplog):
    async def broken(arguments, ctx):
        raise RuntimeError("disk on fire")

    ctx = RunContext(tenant_id=1)  # a direct call before its record exists
    result = run(ToolRegistry([make("broken", handler=broken)]).execute(
        ToolCall("c1", "broken", {}), ctx
    ))  # fmt: skip
    assert result.error == "the tool failed unexpectedly; the details are in the server log"
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("running tool broken failed (tenant 1, run None, call c1):\n")


def test_a_tool_failing_without_a_message_is_named_by_its_exception():
    def silent(arguments, ctx):
        raise ToolFailed()

    result = run(ToolRegistry([make("silent", handler=silent)]).execute(
        ToolCall("c1", "silent", {}), CTX
    ))  # fmt: skip
    assert result.error == "ToolFailed"


def test_an_unknown_tool_is_named_with_at_most_three_close_names_or_twenty_others():
    many = ToolRegistry([make(f"tool_{i:02}") for i in range(25)] + [make("search")])
    close = run(many.execute(ToolCall("c1", "tool_1", {}), CTX)).error
    assert close == "unknown tool 'tool_1'; did you mean tool_21, tool_19, tool_18?"  # 3 of 12
    # "seaxyz" shares half its letters with "search": close enough (a ratio of 0.5).
    assert run(many.execute(ToolCall("c1", "seaxyz", {}), CTX)).error == (
        "unknown tool 'seaxyz'; did you mean search?"
    )
    far = run(many.execute(ToolCall("c1", "zzz", {}), CTX)).error
    listed = ", ".join(sorted(item.name for item in many)[:20])
    assert far == f"unknown tool 'zzz'; available tools: {listed}"
    assert run(ToolRegistry().execute(ToolCall("c1", "zzz", {}), CTX)).error == (
        "unknown tool 'zzz'; available tools: none"
    )
    # Asking for the exact request of a tool that is gone (an approver's edit) says the same.
    with pytest.raises(ToolFailed) as gone:
        many.prepare(ToolCall("c1", "zzz", {}), CTX)
    assert str(gone.value) == far


def test_execute_all_answers_one_call_and_two_calls_each_in_order(registry):
    one = run(registry.execute_all([ToolCall("c1", "search", {"x": 1})], CTX))
    assert [(r.call_id, r.result) for r in one] == [("c1", {"echo": {"x": 1}})]
    two = run(registry.execute_all(
        [ToolCall("c1", "search", {"x": 1}), ToolCall("c2", "fetch", {"x": 2})], CTX
    ))  # fmt: skip
    assert [(r.call_id, r.result) for r in two] == [
        ("c1", {"echo": {"x": 1}}),
        ("c2", {"echo": {"x": 2}}),
    ]


def test_the_events_and_result_of_a_call_say_what_it_did():
    events = []

    async def slow(arguments, ctx):
        await asyncio.sleep(0.05)
        return {"a": arguments["x"], "token": ctx.secrets.get("k")}

    async def broken(arguments, ctx):
        raise ToolFailed("no such city")

    viewed = replace(make("viewed", handler=slow), view=lambda data: {"shown": data["a"]})
    broken_viewed = replace(make("broken", handler=broken), view=lambda data: {"shown": data["a"]})
    ctx = RunContext(
        tenant_id=1, run_id="run_1", secrets=StaticSecrets({"k": "s3cr3t-value"}),
        events=lambda kind, data: events.append((kind, data)),
    )  # fmt: skip
    registry = ToolRegistry([viewed, broken_viewed])
    arguments = {"x": 1, "note": "s3cr3t-value"}
    done = run(registry.execute(ToolCall("c1", "viewed", arguments), ctx))
    # The model sees the tool's view; the run's frame keeps what the handler returned.
    assert done.result == {"shown": 1}
    assert done.data == {"a": 1, "token": "[redacted]"}
    assert done.latency_ms >= 50
    failed = run(registry.execute(ToolCall("c2", "broken", {"x": 2}), ctx))
    assert (failed.result, failed.error, failed.data) == (None, "no such city", None)
    assert events == [
        ("tool.started", {
            "call_id": "c1", "name": "viewed", "arguments": {"x": 1, "note": "[redacted]"},
        }),
        ("tool.completed", {
            "call_id": "c1", "name": "viewed", "result": {"shown": 1}, "error": None,
            "latency_ms": round(done.latency_ms, 3),
        }),
        ("tool.started", {"call_id": "c2", "name": "broken", "arguments": {"x": 2}}),
        ("tool.completed", {
            "call_id": "c2", "name": "broken", "result": None, "error": "no such city",
            "latency_ms": round(failed.latency_ms, 3),
        }),
    ]  # fmt: skip


def test_an_approved_request_is_sent_as_prepared_whatever_the_arguments_say_now():
    """The request was checked when it was prepared, from arguments the run's frame completed
    (depends_on inputs): the call's own arguments may lack them."""
    recorder = _Recorder()
    item = Tool(
        name="post", description="Post.", handler=lambda a, c: None, preparer=recorder,
        input_schema={
            "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
        },
    )  # fmt: skip
    registry = ToolRegistry([item])
    ctx = RunContext(tenant_id=1, secrets=StaticSecrets({"k": "s3cr3t-value"}))
    prepared = registry.prepare(ToolCall("c1", "post", {"x": 1}), ctx)
    sent = run(registry.execute(ToolCall("c1", "post", {}, prepared=prepared), ctx))
    assert (sent.error, sent.result) == (None, "sent") and recorder.sent == [prepared]
