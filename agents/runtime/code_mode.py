"""Code mode: the model writes a short Python program that calls the agent's tools as
functions, instead of one tool call per round; the program runs in Monty (pydantic-monty, a
Python interpreter written in Rust, in a pool of worker subprocesses), which has no file
system, network, environment or imports of its own — only what the host answers.

Each function call of the program is a call through the tool-call step
(agents/runtime/tool_step.py), the same as a call the model makes directly: recorded, its
events, its approval rule, the run's tool-call limit, rate limits, quotas and egress. Its id
is the `run_code` call's id plus its order in the program (`call_1/3`).

Durable by replay: the program is deterministic (a frozen clock, a seeded `random`, sleeps
skipped), so a resumed run — its worker died, or an approval was decided — runs it again
from the start and answers each call already recorded with its recorded result; only the
calls not recorded yet go through the step. A call that needs approval stops the program
and parks the run; once decided, the replay reaches that call with its decision. The calls
made so far (name and arguments) are kept in the run's state (`RunState.programs`): a
replay that asks for a different call is stopped rather than given another call's result.

What the program sees of a result: the text the model would read, parsed as JSON when it is
JSON. A failed call raises an exception whose message is the tool's error (catchable).
"""

from __future__ import annotations

import atexit
import json
import keyword
import re
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from agents.runtime.spec import CodeLimits
from agents.runtime.structured import FINAL_ANSWER
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall, ToolResult

if TYPE_CHECKING:
    import pydantic_monty as monty

    from agents.runtime.state import RunState

RUN_CODE = "run_code"
# A closed sandbox pool stops its worker in the background; a process that exits within
# that time aborts (SIGABRT, pydantic-monty 1.4). The process waits for it at exit instead.
_WORKER_STOP_S = 0.5
_last_pool_closed = [0.0]
NOT_FUNCTIONS = frozenset({RUN_CODE, FINAL_ANSWER})  # never callable from a program
_ERROR_CHARS = 2000


class CallStep(Protocol):
    """The tool-call step (agents/runtime/tool_step.py ToolCallStep), as a program uses it:
    its outcome tells the calls still waiting (`awaiting`, `suspended`)."""

    async def run(self, state: RunState, calls: Sequence[ToolCall]) -> Any: ...


class ProgramStopped(Exception):
    """The program was stopped by the host: a limit, or a replay that diverged."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def function_name(tool_name: str) -> str:
    """A tool's name as a Python identifier (tool names may hold '-')."""
    name = re.sub(r"\W", "_", tool_name)
    if not name.isidentifier() or keyword.iskeyword(name):
        name = f"tool_{name}"
    return name


def program_functions(
    tools: ToolRegistry, client_tools: frozenset[str], final_answer: str = FINAL_ANSWER
) -> dict[str, Tool]:
    """The tools a program may call, by function name: the agent's own, not run_code,
    final_answer (`final_answer`: its name in this run) or those the API caller runs."""
    functions: dict[str, Tool] = {}
    for item in tools:
        if item.name in {*NOT_FUNCTIONS, final_answer} or item.name in client_tools:
            continue
        functions.setdefault(function_name(item.name), item)
    return functions


_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}


def signature(name: str, item: Tool) -> str:
    """`def name(*, a: int, b: str = ...) -> Any:  # description`, from the input schema."""
    schema = item.model_schema or item.input_schema
    properties = schema.get("properties", {}) or {}
    required = set(schema.get("required", ()) or ())
    params = []
    for key in sorted(properties, key=lambda k: (k not in required, list(properties).index(k))):
        spec = properties[key] if isinstance(properties[key], dict) else {}
        kind = spec.get("type")
        hint = " | ".join(_TYPES.get(k, "Any") for k in kind) if isinstance(kind, list) else None
        hint = hint or _TYPES.get(kind, "Any")
        params.append(f"{key}: {hint}" + ("" if key in required else " = ..."))
    args = f"*, {', '.join(params)}" if params else ""
    summary = item.description.strip().splitlines()[0][:200]
    return f"def {name}({args}) -> Any:  # {summary}"


def limits_text(limits: CodeLimits) -> str:
    """A program's limits in words: for the model (run_code's description) and for people
    (the agent's page)."""
    return (
        f"{limits.time_s:g} s of execution, {limits.memory_bytes // (1024 * 1024)} MB of "
        f"memory, {limits.output_chars} characters of output, {limits.tool_calls} tool calls"
    )


def run_code_tool(functions: dict[str, Tool], limits: CodeLimits) -> Tool:
    """The `run_code` tool offered to the model: its description lists the functions."""
    listed = "\n".join(signature(name, item) for name, item in functions.items())
    description = (
        "Run a short Python program that calls your tools as functions; use it to make "
        "many tool calls and combine their results in one step. Call functions with "
        "keyword arguments. A function returns the tool's result (parsed JSON where it is "
        "JSON); a failed call raises an exception with the tool's error. What the program "
        "prints and the value of its last expression come back to you. No files, network "
        f"or imports other than the standard ones Monty provides; limits: {limits_text(limits)}.\n"
        f"Functions:\n{listed or '(none)'}"
    )
    return Tool(
        name=RUN_CODE,
        description=description,
        input_schema={
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python program."}},
            "required": ["code"],
            "additionalProperties": False,
        },
        handler=_never_called,
        # Never executed by the registry: the tool-call step runs programs (Program.run); its
        # calls are approved, limited and recorded one by one.
        capability=Capability(effect=Effect.NONE, idempotent=False),
    )


def _never_called(arguments: dict[str, Any], ctx: Any) -> Any:
    raise RuntimeError("run_code is run by the tool-call step, not the registry")


@dataclass
class ProgramResult:
    """What running (or replaying) a program came to: a result to record, or the calls
    still waiting (for a human's decision, or on a child run)."""

    result: ToolResult | None = None
    awaiting: list[ToolCall] | None = None
    suspended: list[ToolCall] | None = None
    stopped: str = ""  # why the host stopped it (a limit, a refused operation), for an event
    reused: list[str] | None = None  # calls answered from their records (a replay)


class Program:
    """Runs `run_code` calls for one step: `functions` by name, within `limits`."""

    def __init__(self, functions: dict[str, Tool], limits: CodeLimits) -> None:
        self.functions = functions
        self.limits = limits

    async def run(self, step: CallStep, state: RunState, call: ToolCall) -> ProgramResult:
        """Run the program of `call` from its start, replaying recorded calls. Host errors
        (the database, a bug) propagate; the program's own end up in the result."""
        code = call.arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return _error(call, "run_code needs `code`: the Python program to run")
        record = state.programs.setdefault(call.id, {})
        if "clock" not in record:  # the program's clock, the same on every replay
            record["clock"] = datetime.now(UTC).isoformat()
            record["calls"] = []
        run = _Run(self, step, state, call, record)
        try:
            done = await run.execute(code)
        except ProgramStopped as exc:
            done = _error(call, str(exc), stopped=exc.reason)
        done.reused = run.reused
        return done


class _Run:
    def __init__(self, program, step, state, call, record) -> None:
        self.program: Program = program
        self.limits: CodeLimits = program.limits
        self.step: CallStep = step
        self.state: RunState = state
        self.call: ToolCall = call
        self.record: dict[str, Any] = record
        self.printed: list[str] = []
        self.printed_chars = 0
        self.output_exceeded = False
        self.calls = 0
        self.reused: list[str] = []
        self.waiting: Any = None  # the step's outcome, when a call waits

    def _print(self, stream: str, text: str) -> None:
        if self.printed_chars + len(text) > self.limits.output_chars:
            keep = max(0, self.limits.output_chars - self.printed_chars)
            self.printed.append(text[:keep])
            self.printed_chars = self.limits.output_chars
            self.output_exceeded = True
            raise RuntimeError(f"output limit of {self.limits.output_chars} characters reached")
        self.printed.append(text)
        self.printed_chars += len(text)

    async def execute(self, code: str) -> ProgramResult:
        import pydantic_monty as monty  # on a program's first run, not at every process's start

        limits = self.limits
        clock = datetime.fromisoformat(self.record["clock"])
        seed = zlib.crc32(self.call.id.encode())  # the same on every replay of this call
        placeholders = {name: _never_called for name in self.program.functions}
        pool = monty.AsyncMonty(
            min_processes=1, max_processes=1, request_timeout=limits.time_s + 10
        )
        try:
            async with (
                pool,
                pool.checkout(
                    limits={
                        "max_feed_duration_secs": limits.time_s,
                        "max_memory": limits.memory_bytes,
                        "max_recursion_depth": limits.recursion_depth,
                        "max_suspensions": limits.tool_calls * 4 + 100,
                    },
                    os_policy={"datetime": clock, "sleep": "zero", "random_start": {"seed": seed}},
                ) as session,
            ):
                snapshot = await session.feed_start(
                    code, external_lookup=placeholders, print_callback=self._print
                )
                while not isinstance(snapshot, monty.MontyComplete):
                    snapshot = await self._answer(snapshot)
                    if self.waiting is not None:  # parked: the worker is dropped with the pool
                        return ProgramResult(
                            awaiting=self.waiting.awaiting, suspended=self.waiting.suspended
                        )
                value = snapshot.output
        except monty.MontySyntaxError as exc:
            return _error(self.call, _shown(exc.display()))
        except monty.MontyRuntimeError as exc:
            return self._failed(exc)
        except monty.MontyCrashedError as exc:
            why = "ran past its time limit" if exc.timed_out else "crashed the sandbox"
            return _error(self.call, f"the program was stopped: it {why}", stopped="crashed")
        except monty.MontyError:  # (conversion of a value, a broken worker: no internals)
            return _error(self.call, "the sandbox could not run this program", stopped="error")
        finally:
            _last_pool_closed[0] = time.monotonic()
        return ProgramResult(result=ToolResult(self.call.id, self.call.name, self._output(value)))

    async def _answer(self, snapshot: Any) -> Any:
        import pydantic_monty as monty

        if isinstance(snapshot, monty.AsyncNameLookupSnapshot):
            return await snapshot.resume_auto()  # a tool function, or NameError
        if isinstance(snapshot, monty.AsyncFutureSnapshot):
            raise ProgramStopped("asynchronous tool calls are not supported", "error")
        if snapshot.is_os_function:  # files, environment, clock: refused (PermissionError)
            return await snapshot.resume_not_handled()
        name = snapshot.function_name
        item = self.program.functions.get(name)
        if item is None:
            error = NameError(f"name {name!r} is not defined")
            return await snapshot.resume({"exception": error})
        if snapshot.args:
            error = TypeError(f"call {name}() with keyword arguments, e.g. {name}(key=value)")
            return await snapshot.resume({"exception": error})
        value = await self._tool_call(item, _plain(snapshot.kwargs))
        if self.waiting is not None:
            return snapshot
        return await snapshot.resume(value)

    async def _tool_call(self, item: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.calls > self.limits.tool_calls:
            raise ProgramStopped(
                f"the program was stopped: it made more than {self.limits.tool_calls} tool calls",
                "tool_calls",
            )
        nested = ToolCall(id=f"{self.call.id}/{self.calls}", name=item.name, arguments=arguments)
        calls: list[list[Any]] = self.record["calls"]
        if self.calls <= len(calls):  # replayed: it must ask for the call it asked before
            if calls[self.calls - 1] != [item.name, arguments]:
                raise ProgramStopped(
                    f"the program was stopped: resumed, it called {item.name} where it had "
                    f"called {calls[self.calls - 1][0]} (a program must make the same calls "
                    "when it runs again)",
                    "diverged",
                )
        else:  # (saved with the step's checkpoint before the call runs)
            calls.append([item.name, arguments])
        if nested.id in self.state.results:
            self.reused.append(nested.id)
        else:
            outcome = await self.step.run(self.state, [nested])
            if outcome.awaiting or outcome.suspended:
                self.waiting = outcome
                return {}
        message = self.state.results[nested.id]
        if message.is_error:
            return {"exception": RuntimeError(f"{item.name} failed: {message.content}")}
        return {"return_value": _parsed(message.content)}

    def _failed(self, exc: monty.MontyRuntimeError) -> ProgramResult:
        brief = exc.display(format="type-msg")
        kind = brief.split(":", 1)[0]
        reason = "output" if self.output_exceeded else _STOPPED.get(kind, "")
        text = _shown(exc.display())
        if reason:
            text = f"the program was stopped ({_reason(reason, self.limits)}):\n{text}"
        printed = "".join(self.printed).strip()
        if printed:  # (already bounded by the output limit)
            text = f"{text}\nIt printed before that:\n{printed}"
        return ProgramResult(
            result=ToolResult(self.call.id, self.call.name, error=text), stopped=reason
        )

    def _output(self, value: Any) -> str:
        printed = "".join(self.printed)
        parts = [printed.rstrip("\n")] if printed.strip() else []
        if value is not None:
            parts.append(f"Result: {json.dumps(_plain(value), ensure_ascii=False, default=str)}")
        text = "\n".join(parts) or "(the program printed nothing and returned None)"
        if len(text) > self.limits.output_chars:
            text = text[: self.limits.output_chars] + "\n[output cut at the limit]"
        return text


_STOPPED = {
    "TimeoutError": "time",
    "MemoryError": "memory",
    "RecursionError": "recursion",
    "PermissionError": "file",
    "FileNotFoundError": "file",
    "OSError": "file",
    "ModuleNotFoundError": "import",
    "ImportError": "import",
}


def _reason(reason: str, limits: CodeLimits) -> str:
    """Why the program was stopped, for the model: the limit named with its value."""
    return {
        "time": f"its time limit: {limits.time_s:g} s of execution",
        "memory": f"its memory limit: {limits.memory_bytes // (1024 * 1024)} MB",
        "recursion": f"its recursion limit: a depth of {limits.recursion_depth}",
        "output": f"its output limit: {limits.output_chars} characters",
        "file": "no file system in the sandbox",
        "import": "that module is not available in the sandbox",
    }[reason]


def _error(call: ToolCall, text: str, *, stopped: str = "") -> ProgramResult:
    return ProgramResult(result=ToolResult(call.id, call.name, error=text), stopped=stopped)


def _shown(text: str) -> str:
    return text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + "\n[cut]"


def _parsed(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


def _plain(value: Any) -> Any:
    """A value from the sandbox as plain JSON data (tuples as lists, others as text)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def with_code_mode(
    tools: ToolRegistry,
    limits: CodeLimits,
    client_tools: frozenset[str],
    *,
    final_answer: str = FINAL_ANSWER,
):
    """The registry with run_code added, the Program that runs it, and the registry the
    model is offered: run_code, final_answer and the caller's tools (the agent's own are
    reached through programs)."""
    functions = program_functions(tools, client_tools, final_answer)
    code_tool = run_code_tool(functions, limits)
    tools.register(code_tool, replace=True)
    direct = {RUN_CODE, final_answer, *client_tools}
    offered = ToolRegistry(item for item in tools if item.name in direct)
    return Program(functions, limits), offered


@atexit.register
def _let_the_last_worker_stop() -> None:
    wait = _WORKER_STOP_S - (time.monotonic() - _last_pool_closed[0])
    if _last_pool_closed[0] and wait > 0:
        time.sleep(wait)
