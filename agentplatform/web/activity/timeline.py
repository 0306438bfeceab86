"""A run's events folded into what a person reads: model calls, tool calls (started and
completed joined by call id), a workflow's steps (started and completed or failed joined by
their path; a step reused from its record on resume), approvals (joined with their
decision), errors and the end.

Text deltas are left out (the run's output holds the text). At most MAX_EVENTS events are
read, in two queries (events, approvals).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents import selectors
from agents.models import Approval, Run
from agents.runs import request_text
from agents.runtime.code_mode import RUN_CODE

MAX_EVENTS = 2000
TERMINAL_TYPES = {"run.completed", "run.failed", "run.cancelled"}


@dataclass
class Entry:
    kind: str  # started | model | tool | step | approval | end | other
    type: str  # the event type
    seq: int
    at: datetime
    offset_ms: int
    payload: dict[str, Any]
    # tool calls
    name: str = ""
    call_id: str = ""
    arguments: str = ""
    result: str = ""
    error: str = ""
    latency_ms: float | None = None
    finished: bool = False
    # model calls
    input_tokens: int = 0
    output_tokens: int = 0
    tool_call_names: list[str] = field(default_factory=list)
    # approvals
    approval: Approval | None = None
    # workflow steps
    path: str = ""
    reused: bool = False

    @property
    def depth(self) -> int:
        """How deep a workflow step is nested (0: a step of the workflow itself)."""
        return self.path.count(".")


def as_text(value: Any) -> str:
    """Pretty JSON for structures, the string itself for strings; shown escaped in <pre>."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def run_timeline(run: Run) -> tuple[list[Entry], bool]:
    """The entries of `run` in event order, and whether the events were cut at MAX_EVENTS."""
    events = selectors.run_events_for_timeline(run=run, limit=MAX_EVENTS + 1)
    truncated = len(events) > MAX_EVENTS
    events = events[:MAX_EVENTS]
    # A call asked again (its request prepared again from an edit) has one approval per ask,
    # in the order of its approval.required events.
    approvals: dict[str, list[Approval]] = {}
    for approval in selectors.run_own_approvals(run=run):
        approval.run = run  # the card links its run; no query per approval
        approval.arguments_text = as_text(approval.arguments)
        approval.edited_text = as_text(approval.edited_arguments)
        approval.request_text = request_text(approval.prepared_request)
        approvals.setdefault(approval.call_id, []).append(approval)
    first = events[0].created_at if events else None
    entries: list[Entry] = []
    tools: dict[str, Entry] = {}
    steps: dict[str, Entry] = {}
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        offset = int((event.created_at - first).total_seconds() * 1000) if first else 0
        entry = Entry(
            kind="other",
            type=event.type,
            seq=event.seq,
            at=event.created_at,
            offset_ms=offset,
            payload=payload,
        )
        call_id = str(payload.get("call_id", ""))
        event_type = _as_run_event(event.type)
        if event_type.startswith("workflow.step."):
            if _step(entry, event_type, payload, steps):
                entries.append(entry)
            continue
        if event.type == "run.started":
            entry.kind = "started"
        elif event_type == "inference.started":
            continue  # its completion says everything
        elif event_type == "inference.completed":
            entry.kind = "model"
            usage = payload.get("usage") or {}
            entry.input_tokens = int(usage.get("input_tokens") or 0)
            entry.output_tokens = int(usage.get("output_tokens") or 0)
            entry.latency_ms = payload.get("latency_ms")
            entry.error = as_text(payload.get("error"))
            entry.result = as_text(payload.get("text"))
            entry.tool_call_names = [c.get("name", "?") for c in payload.get("tool_calls") or []]
        elif event_type == "tool.started":
            entry.kind, entry.name, entry.call_id = "tool", str(payload.get("name", "")), call_id
            arguments = payload.get("arguments")
            code = arguments.get("code") if isinstance(arguments, dict) else None
            if entry.name == RUN_CODE and isinstance(code, str):  # a program: as written
                arguments = code
            entry.arguments = as_text(arguments)
            if call_id:
                tools[call_id] = entry
        elif event_type == "tool.usage" and call_id in tools:  # what the tool asked models
            for spent in payload.get("models") or []:
                tools[call_id].input_tokens += int(spent.get("input_tokens") or 0)
                tools[call_id].output_tokens += int(spent.get("output_tokens") or 0)
            continue
        elif event_type == "tool.completed":
            started = tools.pop(call_id, None) if call_id else None
            if started is not None:
                _complete(started, payload)
                continue
            entry.kind, entry.name, entry.call_id = "tool", str(payload.get("name", "")), call_id
            _complete(entry, payload)
        elif event.type == "approval.required":
            entry.kind, entry.call_id = "approval", call_id
            entry.name = str(payload.get("name", ""))
            entry.arguments = as_text(payload.get("arguments"))
            asks = approvals.get(call_id)
            entry.approval = (asks.pop(0) if len(asks) > 1 else asks[0]) if asks else None
        elif event.type in TERMINAL_TYPES:
            entry.kind = "end"
            entry.error = as_text(payload.get("error"))
        entries.append(entry)
    return entries, truncated


# A workflow's agent step's model and tool calls are shown as the run's own would be (its
# run.started/completed stay as they are: the workflow's run goes on).
_AGENT_STEP_CALLS = frozenset(
    {"inference.started", "inference.completed", "tool.started", "tool.usage", "tool.completed"}
)


def _as_run_event(type: str) -> str:
    """The event type a workflow step's call event is shown as: a tool step's call as a
    tool call, an agent step's model and tool calls as model and tool calls."""
    if type.startswith("workflow.tool."):
        return type.removeprefix("workflow.")
    inner = type.removeprefix("workflow.agent.")
    return inner if inner in _AGENT_STEP_CALLS else type


def _step(entry: Entry, type: str, payload: dict[str, Any], steps: dict[str, Entry]) -> bool:
    """A workflow step's event: a new entry (started, reused), or its started entry completed
    (then False: nothing new to show)."""
    path = str(payload.get("path", ""))
    entry.kind, entry.name, entry.path = "step", str(payload.get("step", "")), path
    if type == "workflow.step.started":
        entry.arguments = as_text(payload.get("input"))
        steps[path] = entry
        return True
    if type == "workflow.step.reused":
        entry.reused = entry.finished = True
        entry.result = as_text(payload.get("output"))
        return True
    started = steps.pop(path, None)
    target = started or entry
    target.finished = True
    target.result = as_text(payload.get("output"))
    target.error = as_text(payload.get("error"))
    target.latency_ms = payload.get("latency_ms")
    return started is None


def _complete(entry: Entry, payload: dict[str, Any]) -> None:
    entry.finished = True
    entry.result = as_text(payload.get("result"))
    entry.error = as_text(payload.get("error"))
    entry.latency_ms = payload.get("latency_ms")
