"""The dry call: an unsaved HTTP tool (a draft from an import, or the tool form's fields)
tried once with the given arguments, before anything is saved (issue #40).

It takes the path of every direct call (direct_calls.py): the one tool-call step, so the
arguments are validated, the rate limit counted (`tools.imports.DryCallLimiter`: at most
DRY_CALLS_PER_MINUTE per person in the tenant, whatever the draft's name, and per tool name
with the saved tool's calls), its timeout kept, secrets masked in what is recorded, and the
call recorded as a run (`via` "dry call"). The draft is built by
`tools.imports.draft_tool`, validated exactly as saving it would be and never saved; its
requests go through the guarded egress client, which refuses private addresses as for any
tool. No approval is asked: the person trying it may change the tool and sees the exact
request (`send=False` shows it without sending anything).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import PermissionDenied

from agents.runs.direct_calls import step_and_record, write_one
from agents.runtime.tool_step import ApprovalRule
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Action, Principal
from tools.imports import DryCallLimiter, draft_tool
from tools.loader import tenant_tools
from tools.models import ToolDefinition
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall, ToolFailed
from tools.runtime.validation import compile_validator
from tools.services import tool_context

MAX_ANSWER_CHARS = 20_000
DRY_CALL = "dry call"  # the `via` of its events
NO_APPROVAL = ApprovalRule("never")


@dataclass(frozen=True)
class DryCallResult:
    """`request`: the prepared request as HTTP writes it, the credential masked. `status`,
    `answer`: what the service answered (None, "" when nothing was answered: refused,
    timed out, not sent); `answer` at most MAX_ANSWER_CHARS (`answer_truncated`), secrets
    masked. `model_view`: what the model would read of a successful answer (model_view
    applied). `schema_check`: {"ok", "problems"} against output_schema (None without one,
    or without a successful answer). `error`: why the call failed, as the model would read
    it. `run_id`: the run recording it (None when not sent)."""

    request: str
    sent: bool = False
    status: int | None = None
    answer: str = ""
    answer_truncated: bool = False
    model_view: Any = None
    schema_check: dict[str, Any] | None = None
    error: str | None = None
    run_id: int | None = None


@dataclass(frozen=True)
class _Toolbox:  # the one-tool registry `step_and_record` reads
    registry: ToolRegistry
    secrets: Any


def dry_call(
    *,
    tenant: Tenant,
    user: Any,  # the person or ApiKey trying it; None: the platform
    fields: dict[str, Any],
    secret: str | None = None,
    arguments: Any = None,
    definition: ToolDefinition | None = None,
    send: bool = True,
) -> DryCallResult:
    """Try the tool `fields` make (a new one, or `definition` changed: its stored secret
    kept when `secret` is None; "": tried without one). ValidationError as saving the
    fields would raise it; PermissionDenied unless `user` may change the tenant's tools;
    Http404 for another tenant's definition. A tool failure (invalid arguments, a refused
    address, an HTTP error) is the result's `error`."""
    if user is not None and not Principal.for_initiator(tenant, user).may(Action.CHANGE_CONFIG):
        raise PermissionDenied("You may not change this tenant's tools.")
    api_key = user if isinstance(user, ApiKey) else None
    person = None if api_key is not None else user
    draft = draft_tool(tenant=tenant, changes=fields, secret=secret, definition=definition)
    secrets = tenant_tools(tenant).secrets.with_values(draft.secrets)
    toolbox = _Toolbox(ToolRegistry([draft.tool]), secrets)
    call = ToolCall(
        id=f"call_{uuid.uuid4().hex[:12]}", name=draft.tool.name, arguments=arguments or {}
    )
    ctx = tool_context(tenant=tenant, user_id=getattr(person, "pk", None), secrets=secrets)
    try:
        prepared = toolbox.registry.prepare(call, ctx)
    except ToolFailed as exc:
        return DryCallResult(request="", error=str(exc))
    shown = prepared.as_text()
    if not send:
        return DryCallResult(request=shown)
    outcome = async_to_sync(_send)(toolbox, tenant, call, api_key, person)
    answered = draft.answers.last
    answer = draft.redact(answered.text) if answered is not None else ""
    schema_check = None
    if outcome.status == "succeeded" and draft.output_schema:
        problem = compile_validator(draft.output_schema)(outcome.data)
        schema_check = {"ok": problem is None, "problems": [] if problem is None else [problem]}
    return DryCallResult(
        request=shown,
        sent=True,
        status=answered.status_code if answered is not None else None,
        answer=answer[:MAX_ANSWER_CHARS],
        answer_truncated=len(answer) > MAX_ANSWER_CHARS,
        model_view=_json_safe(outcome.result) if outcome.status == "succeeded" else None,
        schema_check=schema_check,
        error=outcome.error,
        run_id=outcome.run_id,
    )


async def _send(toolbox: _Toolbox, tenant: Tenant, call: ToolCall, api_key, user):
    caller = f"user:{user.pk}" if user is not None else (
        f"key:{api_key.pk}" if api_key is not None else "platform"
    )  # fmt: skip
    return await step_and_record(
        sync_to_async, sync_to_async(write_one), toolbox, tenant, call, api_key, user,
        DRY_CALL, None, approval=NO_APPROVAL, rate_limiter=DryCallLimiter(caller),
    )  # fmt: skip


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
