"""`resume_run`: the platform's one run-control tool on MCP — a failed run resumed from its
last checkpoint (agents.runs.resume), as `POST /api/v1/runs/{id}/resume` does.

Listed for callers the policy lets resume runs (`resume_run`: scope `run`) unless their key
is limited to named tools; a registry tool of the same name wins it. The answer is the
run queued (or why not, as an error result); the run's answer comes on
`GET /api/v1/runs/{id}`."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool

from agentplatform.mcp.results import error_result
from agents import access
from agents.runs import RunNotResumable, run_resume
from base.stream_reads import stream_read
from tenancy.policy import Action, Principal
from tools.runtime.validation import compile_validator

RESUME_TOOL = "resume_run"
RESUME_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "integer", "minimum": 1, "description": "The failed run's id."}
    },
    "required": ["run_id"],
    "additionalProperties": False,
}
RESUME_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"run_id": {"type": "integer"}, "status": {"type": "string"}},
    "required": ["run_id", "status"],
}
_check_arguments = compile_validator(RESUME_INPUT_SCHEMA)


def resume_offered(principal: Principal) -> bool:
    """Whether tools/list shows `resume_run` to this caller."""
    return principal.limited_to_tools() is None and principal.may(Action.RESUME_RUN)


def resume_tool() -> MCPTool:
    return MCPTool(
        name=RESUME_TOOL,
        title="Resume a failed run",
        description="Resume a failed run (its starter or an admin) once what failed it is "
        "fixed: it goes on from its last step with its agent's configuration now; recorded "
        "tool results are reused and no write is sent again. Answers with the run queued; "
        "its answer: GET /api/v1/runs/{run_id}.",
        input_schema=RESUME_INPUT_SCHEMA,
        output_schema=RESUME_OUTPUT_SCHEMA,
        annotations=ToolAnnotations(
            title="Resume a failed run", read_only_hint=False, idempotent_hint=False
        ),
    )


async def resume(principal: Principal, arguments: dict[str, Any]) -> CallToolResult:
    """Resume the run `arguments["run_id"]`; refusals are `error_result`s saying why."""
    problem = _check_arguments(arguments)
    if problem is not None:
        return error_result(f"invalid arguments: {problem}")
    run_id = arguments["run_id"]
    try:
        status = await stream_read(_resume)(principal, run_id)
    except Http404:
        return error_result(f"No such run: {run_id}.")
    except PermissionDenied as exc:
        return error_result(str(exc), run_id=run_id)
    except RunNotResumable as exc:
        return error_result(" ".join(exc.messages), run_id=run_id, status="not_resumable")
    text = f"Run {run_id} resumed: {status}. Its answer: GET /api/v1/runs/{run_id}."
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={"run_id": run_id, "status": status},
    )


def _resume(principal: Principal, run_id: int) -> str:
    run = access.visible_run(principal, run_id)  # 404 for runs the caller may not see
    return run_resume(tenant=principal.tenant, run=run, by=principal.initiator).status
