"""Asking again: an approver who edits the arguments of a call whose exact request was
prepared (an HTTP tool) has not seen the request those arguments make. So the call is
prepared again here, with the run's context as the worker would use it, and the new request
goes to a new approval; nothing is sent until that one is approved
(`agents.runs.approval_decide`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.core.exceptions import ValidationError

from agents.models import Approval
from agents.runs.direct_calls import run_tool_context
from agents.runtime.tool_step import call_payload
from tools.loader import tenant_tools
from tools.runtime.frames import Frame, FrameError
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall, ToolFailed


def prepare_edited(approval: Approval, arguments: dict[str, Any]) -> tuple[ToolCall, dict]:
    """The approval's call with these arguments and the exact request they make now, and
    its `approval.required` event (secrets masked). ValidationError on `arguments` saying
    why it cannot be prepared (invalid arguments, the tool gone). Reads the tenant's tools
    (cached per process); sends nothing."""
    run = approval.run
    toolbox = tenant_tools(run.tenant_id)
    ctx = run_tool_context(run, toolbox.secrets)
    call = ToolCall(approval.call_id, approval.tool_name, arguments)
    try:
        filled = _from_frame(toolbox.registry, call, (run.state or {}).get("frame"))
        prepared = toolbox.registry.prepare(filled, ctx)
    except ToolFailed as exc:
        raise ValidationError({"arguments": str(exc)}) from None
    call = replace(call, prepared=prepared)  # (the approver's arguments, as the model's are)
    return call, call_payload(call, ctx)


def _from_frame(registry: ToolRegistry, call: ToolCall, frame: Any) -> ToolCall:
    """The call's arguments completed from the run's frame, as the worker does
    (tools/runtime/frames.py); ToolFailed when they cannot be."""
    item = registry.get(call.name) if registry.has(call.name) else None
    if item is None or not (item.depends_on or item.reference_inputs):
        return call
    try:
        filled = Frame.from_dict(frame).completed(
            call.arguments, item.depends_on, item.reference_inputs
        )
    except FrameError as exc:
        raise ToolFailed(str(exc)) from None
    return replace(call, arguments=filled)


def request_text(prepared_request: dict[str, Any] | None) -> str:
    """An approval's prepared request as text for a face to show, saying what approving
    does ("" when the call has none)."""
    if prepared_request is None:
        return ""
    shown = PreparedRequest.from_dict(prepared_request).as_text()
    return f"Approving sends exactly this request (its credential added, shown as ***):\n{shown}"
