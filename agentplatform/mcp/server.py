"""Each tenant's tools, agents and crews as MCP tools, decided per request by the caller's key.

`tools/list` (scope `read`): the tenant's registry in MCP form — the same definitions its
agents see — then `ask_<slug>` for each active agent and crew. `tools/call` (scope `run`):
a registry tool goes through `agents.runs.direct_calls.atool_run` (validated, executed or parked
for approval, recorded as a Run); `ask_<slug>` starts a run of that agent or crew and waits
for its answer like the OpenAI-compatible endpoint; `resume_run` resumes a failed run
(agentplatform/mcp/resume.py). Whatever goes wrong with a call is an
`is_error` result the client's model can read; only a listing without `read` is a JSON-RPC
error. Nothing here decides what a tool does: the registry and the run services do.
"""

from __future__ import annotations

import json
import logging
import textwrap
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    CallToolResult,
    EmptyResult,
    SetLevelRequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types import Tool as MCPTool

from agentplatform.mcp.auth import SignInRefused, caller
from agentplatform.mcp.results import error_result
from agentplatform.mcp.resume import RESUME_TOOL, resume, resume_offered, resume_tool
from agents.models import Agent, Crew, Run
from agents.quotas import QuotaExceeded
from agents.runs import (
    ConversationBusy,
    Ending,
    Nearby,
    ToolRunOutcome,
    atool_run,
    decide_at,
    follow_run,
    request_text,
    run_start,
)
from agents.runtime.spec import RunStatus
from agents.selectors import active_agents_and_crews, conversation_get, model_target
from agents.services import conversation_save
from base.stream_reads import stream_read
from tenancy import rls
from tenancy.models import Tenant
from tenancy.policy import Action, Principal
from tenancy.request_budgets import RATE_LIMITED, principal_retry_after
from tools.loader import tenant_tools
from tools.runtime.validation import compile_validator

ASK_PREFIX = "ask_"
ASK_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "description": "What to ask."},
        "conversation_id": {
            "type": "integer",
            "description": "Continue this conversation (the conversation_id of an earlier "
            "answer); omitted, a new conversation starts.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
ASK_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "run_id": {"type": "integer"},
        "conversation_id": {"type": ["integer", "null"]},
        "status": {"type": "string"},
    },
    "required": ["answer", "run_id", "conversation_id", "status"],
}
_check_ask_arguments = compile_validator(ASK_INPUT_SCHEMA)
logger = logging.getLogger(__name__)


class TenantMCPServer(MCPServer):
    """An MCPServer with no tools of its own: `list_tools` and `call_tool` (which the SDK's
    request handlers call) answer from the caller's tenant.

    It also answers `logging/setLevel` (accepted: it sends no log notifications) and
    `completion/complete` (no completions: it has no prompts or resource templates), as
    the conformance suite expects of every server."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.completion()(_no_completions)
        # (MCPServer has no public hook for this method; its low-level server does)
        self._lowlevel_server.add_request_handler(
            "logging/setLevel", SetLevelRequestParams, _accept_level
        )

    async def list_tools(self) -> list[MCPTool]:
        principal = caller(Action.READ_CONFIG)
        try:
            with rls.tenant_scope(principal.tenant.pk):  # every database read of this call
                tools = await stream_read(tenant_catalog)(principal.tenant.pk)
        except Exception:  # the SDK would send the exception's text to the caller
            logger.exception("MCP tools/list failed (tenant %s)", principal.tenant.pk)
            raise MCPError(INTERNAL_ERROR, "The tool list is unavailable; try again.") from None
        offered = [tool for tool in tools if _offered(principal, tool.name)]
        if resume_offered(principal) and all(tool.name != RESUME_TOOL for tool in tools):
            offered.append(resume_tool())
        return offered

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult:
        try:
            principal = caller(Action.EXECUTE_TOOL)
        except SignInRefused as exc:
            return error_result(exc.message)
        except MCPError as exc:
            return error_result(f"{exc.message} Calling tools needs it.")
        # The key's (or member's) and the tenant's request budgets, with REST's and /v1's
        # requests. A listing is not counted: the SDK's clients list before a session's first
        # call, and the catalog is cached.
        if (wait := await principal_retry_after(principal)) is not None:
            text = RATE_LIMITED.format(wait)
            return error_result(text, status="rate_limited", retry_after_s=wait)
        with rls.tenant_scope(principal.tenant.pk):  # every database read and write of it
            return await self._dispatch(principal, name, arguments)

    async def _dispatch(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> CallToolResult:
        try:
            if not principal.may_execute_tool(name):  # a key limited to other tools
                if name.startswith(ASK_PREFIX):
                    return await ask(principal, name.removeprefix(ASK_PREFIX), arguments)
                if name == RESUME_TOOL and resume_offered(principal):
                    return await resume(principal, arguments)
                return error_result(f"No such tool: {name!r}.")
            return await self._call(principal, name, arguments)
        except Exception:  # the SDK would send the exception's text (a file, a secret) back
            tenant_id = principal.tenant.pk
            logger.exception("MCP tools/call %r failed (tenant %s)", name, tenant_id)
            return error_result("The call failed unexpectedly; the details are in the server log.")

    async def _call(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> CallToolResult:
        try:
            outcome = await atool_run(
                tenant=principal.tenant, name=name, arguments=arguments,
                api_key=principal.api_key, user=principal.user, via="mcp",
            )  # fmt: skip
        except Http404:
            if name.startswith(ASK_PREFIX):
                return await ask(principal, name.removeprefix(ASK_PREFIX), arguments)
            if name == RESUME_TOOL and resume_offered(principal):
                return await resume(principal, arguments)
            return error_result(f"No such tool: {name!r}.")
        except PermissionDenied as exc:
            return error_result(str(exc))
        return tool_run_result(name, outcome)


# -- tools/list ----------------------------------------------------------------------------
def _offered(principal: Principal, name: str) -> bool:
    """Within a limited key's agents and tools (the catalog is the tenant's, cached)."""
    if name.startswith(ASK_PREFIX):
        agents = principal.limited_to_agents()
        return agents is None or name.removeprefix(ASK_PREFIX) in agents
    tools = principal.limited_to_tools()
    return tools is None or name in tools


def tenant_catalog(tenant_id: int) -> list[MCPTool]:
    """The registry's tools, then `ask_<slug>` per active agent and active crew (an agent wins
    a slug a crew shares, a registry tool wins a name). A cache read and two queries."""
    registry = tenant_tools(tenant_id).registry
    tools = [MCPTool.model_validate(item) for item in registry.definitions("mcp")]
    taken = {tool.name for tool in tools}
    for target in active_agents_and_crews(tenant_id=tenant_id):
        name = ASK_PREFIX + target.slug
        if name not in taken:
            taken.add(name)
            tools.append(_ask_tool(name, target))
    return tools


def _ask_tool(name: str, target: Agent | Crew) -> MCPTool:
    what = "agent" if isinstance(target, Agent) else "crew"
    description = target.description.strip() or f"The {what} {target.name}."
    return MCPTool(
        name=name,
        title=target.name,
        description=f"Ask the {what} {target.name!r}: {description} Answers in text; pass "
        "the answer's conversation_id to continue the conversation.",
        input_schema=ASK_INPUT_SCHEMA,
        output_schema=ASK_OUTPUT_SCHEMA,
        annotations=ToolAnnotations(title=target.name, read_only_hint=False, idempotent_hint=False),
    )


async def _no_completions(ref: Any, argument: Any, context: Any) -> None:
    return None


async def _accept_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


# -- tools/call: registry tools ------------------------------------------------------------
def tool_run_result(name: str, outcome: ToolRunOutcome) -> CallToolResult:
    if outcome.status == "succeeded":
        result = outcome.result
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=result if isinstance(result, dict) else None,
        )
    if outcome.status == "awaiting_approval":
        text = (
            f"Approval pending: {name} was not executed. Run {outcome.run_id} waits for a "
            f"human to approve or reject the call: {outcome.decide_at}."
        )
        request = request_text(outcome.prepared_request)
        return error_result(
            "\n".join(filter(None, [text, request])),
            run_id=outcome.run_id,
            status=outcome.status,
            **({"prepared_request": outcome.prepared_request} if request else {}),
        )
    return error_result(outcome.error or "The tool failed.", run_id=outcome.run_id, status="failed")


# -- tools/call: ask_<slug> ----------------------------------------------------------------
async def ask(principal: Principal, slug: str, arguments: dict[str, Any]) -> CallToolResult:
    """Start a run of the agent or crew `slug` and wait for its answer (or its parking)."""
    problem = _check_ask_arguments(arguments)
    if problem is not None:
        return error_result(f"invalid arguments: {problem}")
    nearby = Nearby.reserve()
    try:
        run = await stream_read(_start_ask)(
            principal, slug, arguments["message"], arguments.get("conversation_id"), nearby
        )
    except BaseException as exc:
        nearby.release()
        refusal = _refusal(exc, arguments)
        if refusal is None:
            raise
        return refusal
    streamed: list[str] = []
    ending: Ending | None = None
    async for piece in follow_run(run, execute=lambda: nearby.start(run)):
        if isinstance(piece, Ending):
            ending = piece
        elif isinstance(piece, str):
            streamed.append(piece)
    assert ending is not None  # follow_run always ends with one
    return _answer(run, ending, ending.output or "".join(streamed))


def _refusal(exc: BaseException, arguments: dict[str, Any]) -> CallToolResult | None:
    """The answer to an ask the services refused (None: not a refusal)."""
    if isinstance(exc, Http404 | PermissionDenied):
        return error_result(str(exc))
    if isinstance(exc, ConversationBusy):
        return error_result(
            f"Conversation {arguments.get('conversation_id')} is still answering (run "
            f"{exc.run_id}): wait for that answer, then ask again.",
            answer="",
            run_id=exc.run_id,
            conversation_id=arguments.get("conversation_id"),
            status="conversation_busy",
        )
    if isinstance(exc, QuotaExceeded):  # (a ValidationError too: first)
        return error_result(str(exc), status="quota_exceeded", retry_after_s=exc.retry_after_s)
    if isinstance(exc, ValidationError):
        return error_result(" ".join(exc.messages))
    return None


def _start_ask(
    principal: Principal, slug: str, message: str, conversation_id: int | None, nearby: Nearby
) -> Run:
    """The run of an ask, started by the caller: its key, or the member an OAuth token
    acts for."""
    tenant: Tenant = principal.tenant
    key, user = principal.api_key, None if principal.api_key else principal.user
    target = _target(tenant, slug)
    field = "agent" if isinstance(target, Agent) else "crew"
    with transaction.atomic():  # no conversation left behind by a refused run
        if conversation_id is None:
            conversation = conversation_save(
                tenant=tenant, changes={field: target}, owner_api_key=key, owner_user=user
            )
        else:
            try:
                conversation = conversation_get(tenant=tenant, conversation_id=conversation_id)
            except Http404:
                raise Http404(f"No such conversation: {conversation_id}.") from None
        return run_start(
            tenant=tenant,
            input=message,
            conversation=conversation,
            initiated_by=key or user,
            enqueue=False,  # executed once its answer's stream listens (nearby.start)
            claimed_by=nearby.owner,
            **{field: target},
        )


def _target(tenant: Tenant, slug: str) -> Agent | Crew:
    """The active agent `slug`, else the active crew `slug` (as the OpenAI endpoint does)."""
    try:
        return model_target(tenant=tenant, slug=slug)
    except Http404:
        raise Http404(f"No such tool: {ASK_PREFIX + slug!r}.") from None


def _answer(run: Run, ending: Ending, text: str) -> CallToolResult:
    meta = {"run_id": run.pk, "conversation_id": run.conversation_id, "status": ending.status}
    if ending.status == RunStatus.SUCCEEDED:
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content={"answer": text, **meta},
        )
    if ending.status == RunStatus.AWAITING_APPROVAL:
        lines = [f"Approval pending: run {run.pk} waits for a human to decide these tool calls:"]
        for a in ending.approvals:
            lines.append(f"- {a.tool_name} {json.dumps(a.arguments, default=str)}: {decide_at(a)}")
            if a.prepared_request is not None:
                lines.append(textwrap.indent(request_text(a.prepared_request), "  "))
        lines.append(f"The run then goes on; its answer: GET /api/v1/runs/{run.pk}.")
        return error_result("\n".join(([text] if text else []) + lines), **meta)
    if ending.status == RunStatus.MAX_ROUNDS:
        note = f"Run {run.pk} stopped at its round limit before a final answer."
        return error_result("\n\n".join(filter(None, [text, note])), **meta)
    what = "was cancelled" if ending.status == RunStatus.CANCELLED else "failed"
    detail = f": {ending.error}" if ending.error else "."
    return error_result(f"Run {run.pk} {what}{detail}", **meta)
