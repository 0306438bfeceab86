"""`POST /v1/chat/completions` over a tenant's agents and crews, so any OpenAI client can talk
to them (the models they name: `model_list`). The API key is the tenant API key as a Bearer
token with the `run` scope. A model id is an active agent's slug, or else an active crew's;
a gateway model (`<connection>/<model>`) goes to the gateway (`agentplatform.v1.gateway`).

Each chat completion starts ONE fresh run and follows it through
`agents.runs.reader.follow_run`; a quiet web process executes it itself, a busy one asks a
worker (`agents.runs.worker.Nearby`). The request body is checked and translated in
`chat_request`: the messages reach the agent as a conversation (system and
developer messages added to its instructions), beside the agent's own tools the caller's
`tools` are offered, and a call to one of them ends the answer with `finish_reason`
`tool_calls` (the next request, with the results, is a new run). `response_format` is the
agent's structured output for the run; sampling options apply within the agent's limits.
A crew takes the conversation folded into one text.

A run that parks for a human's approval ends the answer with a message naming the run and
the REST URL where the call is approved or rejected. Errors use OpenAI's shape
`{"error": {"message", "type", "param", "code"}}`.

The views are async: an answer waits on Redis, not in a thread, and a client that goes away
cancels the wait (the run itself goes on and stays readable at /api/v1/runs/{id}).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from agentplatform.event_streams import event_stream_response, sse_message
from agentplatform.v1.chat_request import (
    ChatRequest,
    json_body,
    parse_chat_body,
)
from agentplatform.v1.chat_wire import completion_chunk, completion_object
from agentplatform.v1.endpoint import (
    OpenAIError,
    allow_method,
    authorized,
    model_not_found,
    openai_errors,
    parsed,
)
from agentplatform.v1.gateway import gateway_chat, is_gateway_model
from agentplatform.v1.model_list import resolve_model
from agents.models import Agent, Approval, Crew, Run
from agents.quotas import refusal_retry_after
from agents.runs import HEARTBEAT, Ending, Nearby, follow_run, request_text, run_start
from agents.runtime.spec import RunStatus
from base.stream_reads import brief
from providers.images import fetch_image
from providers.runtime.images import ImageRefused, check_total
from tenancy.authentication import ApiClient
from tenancy.policy import Action, Principal, declares
from tenancy.services import member_named

logger = logging.getLogger(__name__)


# -- chat completions: the request -------------------------------------------------------
async def with_images(chat: ChatRequest) -> ChatRequest:
    """The request with its images given by URL fetched. Call it only once the caller's key
    is checked, so no one without a key can make the platform fetch anything."""
    try:
        client = await chat.client.with_images_fetched(fetch_image)  # type: ignore[union-attr]
        check_total(client.images)
    except ImageRefused as exc:
        raise OpenAIError(400, str(exc), param="messages") from None
    return replace(chat, client=client)


def start_chat_run(client: ApiClient, chat: ChatRequest, nearby: Nearby) -> Run:
    """The run of a checked chat request (the key checked before), claimed by `nearby`."""
    if len(chat.model) > 50:
        raise model_not_found(chat.model)
    target = resolve_model(client.tenant, chat.model)
    end_user = chat.client.end_user if chat.client else ""
    member = None
    principal = Principal.of_key(client.api_key)
    if end_user and principal.acts_for_members:  # else it is only recorded
        member = member_named(client.tenant, end_user, at_most=principal.role)
    return run_start(
        acting_for=member,
        tenant=client.tenant,
        agent=target if isinstance(target, Agent) else None,
        crew=target if isinstance(target, Crew) else None,
        input=chat.input,
        client_request=chat.client,
        initiated_by=client.api_key,
        enqueue=False,  # executed once its answer's stream listens (nearby.start)
        claimed_by=nearby.owner,
    )


async def started(client: ApiClient, chat: ChatRequest) -> tuple[Run, Nearby]:
    """The run of a checked request, and the room it holds in this process."""
    nearby = Nearby.reserve()
    try:
        return await brief(start_chat_run)(client, chat, nearby), nearby
    except BaseException:
        nearby.release()
        raise


async def answered(run: Run, nearby: Nearby) -> Ending:
    """Follow the run (executed here when there is room) to its ending; a failed or
    cancelled run is raised as its error."""
    ending: Ending | None = None
    async with aclosing(follow_run(run, execute=lambda: nearby.start(run))) as progress:
        async for item in progress:
            if isinstance(item, Ending):
                ending = item
    if ending is None:  # pragma: no cover - follow_run always ends with one
        raise RuntimeError("the run's progress ended without its ending")
    if ending.failed:
        raise run_error(run.pk, ending)
    return ending


# -- chat completions: answering -----------------------------------------------------------
def approval_message(request: HttpRequest, run_id: int, approvals: list[Approval]) -> str:
    run_url = request.build_absolute_uri(reverse("api_run", kwargs={"run_id": run_id}))
    lines = [
        f"⏸ Run {run_id} is waiting for a human to approve "
        + ("this tool call:" if len(approvals) == 1 else "these tool calls:")
    ]
    for approval in approvals:
        url = request.build_absolute_uri(
            reverse("api_run_approval", kwargs={"run_id": run_id, "approval_id": approval.pk})
        )
        arguments = json.dumps(approval.arguments, ensure_ascii=False)
        lines.append(f"- `{approval.tool_name}` {arguments}: POST {url}")
        shown = request_text(approval.prepared_request)  # an HTTP tool's exact request
        if shown:
            lines.append("  " + shown.replace("\n", "\n  "))
    lines.append(
        'Send {"decision": "approve"} or {"decision": "reject", "reason": "..."} with a key '
        f"that has the run scope; the run then goes on. Its progress and answer: {run_url} "
        "(and /events)."
    )
    return "\n".join(lines)


def answer_text(request: HttpRequest, run_id: int, ending: Ending, streamed: str) -> str:
    """What the answer adds at the end: the output when nothing streamed (crews stream
    their members' text in the members' runs), and the approval note when parked."""
    extra = "" if streamed else ending.output
    if ending.approvals:
        note = approval_message(request, run_id, ending.approvals)
        already = streamed or extra
        extra += ("\n\n" if already else "") + note
    return extra


def run_error(run_id: int, ending: Ending) -> OpenAIError:
    retry_after = refusal_retry_after(ending.error)
    if retry_after is not None:  # a limit used up before a model call of the run: a 429
        return OpenAIError(
            429,
            f"Run {run_id} was refused: {ending.error.removeprefix('QuotaExceeded: ')}",
            type="insufficient_quota",
            code="quota_exceeded",
            headers={"Retry-After": str(retry_after), "X-Run-Id": str(run_id)},
        )
    what = "was cancelled" if ending.status == RunStatus.CANCELLED else "failed"
    detail = f": {ending.error}" if ending.error and ending.error != "cancelled" else ""
    return OpenAIError(
        500,
        f"Run {run_id} {what}{detail}",
        type="server_error",
        code="run_cancelled" if ending.status == RunStatus.CANCELLED else "run_failed",
        # A retry would start another run; the failed one stays readable by its id.
        headers={"x-should-retry": "false", "X-Run-Id": str(run_id)},
    )


def _wire_calls(ending: Ending) -> list[dict[str, Any]]:
    """The calls for the caller's own tools, as OpenAI sends them (arguments as JSON text)."""
    return [
        {
            "id": call["id"],
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": json.dumps(call["arguments"], ensure_ascii=False),
            },
        }
        for call in ending.tool_calls
    ]


def _completion(run: Run, model: str, content: str, ending: Ending) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if ending.tool_calls:
        message["content"] = content or None
        message["tool_calls"] = _wire_calls(ending)
    created = int(run.created_at.timestamp())
    return completion_object(
        f"chatcmpl-{run.pk}", created, model, message, ending.finish_reason, ending.usage
    )


def _chunk(run: Run, model: str, delta: dict[str, Any] | None, **extra: Any) -> bytes:
    return completion_chunk(
        f"chatcmpl-{run.pk}", int(run.created_at.timestamp()), model, delta, **extra
    )


async def completion_chunks(
    request: HttpRequest, run: Run, chat: ChatRequest, nearby: Nearby
) -> AsyncIterator[bytes]:
    """`chat.completion.chunk` SSE messages from the run's text deltas (for structured
    output, the JSON at the end instead), the calls for the caller's tools, a chunk with the
    finish reason, one with the usage when `stream_options.include_usage` asked for it, then
    `[DONE]`."""
    model = chat.model
    yield _chunk(run, model, {"role": "assistant", "content": ""})
    streamed: list[str] = []
    async with aclosing(follow_run(run, execute=lambda: nearby.start(run))) as progress:
        async for item in progress:
            if item is HEARTBEAT:
                yield b": keep-alive\n\n"
            elif isinstance(item, str):
                if not chat.structured:  # (the text around its final_answer call is not it)
                    streamed.append(item)
                    yield _chunk(run, model, {"content": item})
            elif isinstance(item, Ending):
                if item.failed:
                    yield sse_message(run_error(run.pk, item).body())
                    yield sse_message("[DONE]")
                    return
                extra = answer_text(request, run.pk, item, "".join(streamed))
                if extra:
                    yield _chunk(run, model, {"content": extra})
                for index, call in enumerate(_wire_calls(item)):
                    yield _chunk(run, model, {"tool_calls": [{"index": index, **call}]})
                yield _chunk(run, model, {}, finish_reason=item.finish_reason)
                if chat.include_usage:
                    yield _chunk(run, model, None, usage=item.usage)
    yield sse_message("[DONE]")


@declares(Action.START_RUN, methods=("POST",))
@openai_errors
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """An agent's or a crew's chat, or a gateway model's call: which, the body's model says."""
    allow_method(request, "POST")
    client = await authorized(request, Action.START_RUN)  # before any work for the body
    body = await parsed(json_body, request.body)
    if is_gateway_model(body):
        return await gateway_chat(request, body, client)
    return await agent_chat(request, body, client)


async def agent_chat(request: HttpRequest, body: Any, client: ApiClient) -> HttpResponse:
    """A run of the agent or crew the body names, started and followed to its answer."""
    stream = request.GET.get("stream") == "true"
    chat = await parsed(parse_chat_body, body, stream, size=len(request.body))
    if chat.fetches_images:
        chat = await with_images(chat)
    run, nearby = await started(client, chat)
    headers = {"X-Run-Id": str(run.pk)}
    if chat.stream:
        chunks = completion_chunks(request, run, chat, nearby)
        return event_stream_response(chunks, headers=headers)
    ending = await answered(run, nearby)
    content = ending.output
    if ending.approvals:
        content = (content + "\n\n" if content else "") + approval_message(
            request, run.pk, ending.approvals
        )
    response = JsonResponse(_completion(run, chat.model, content, ending))
    response["X-Run-Id"] = str(run.pk)
    return response
