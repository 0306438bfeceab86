"""OpenAI's Responses API for a tenant's agents: `POST /v1/responses`, `GET /v1/responses/{id}`.

What openai-agents' default model class and Codex-style clients speak. A request's items
are checked by their shapes (`ResponsesRequest`), then it is translated into a Chat
Completions body and checked by the same parser (`chat_request`), so both faces accept and
refuse the same things: `input` (text or
items: messages, `function_call`, `function_call_output`), `instructions`, function
`tools`, `tool_choice`, `text.format` (json_schema / json_object), sampling options,
`previous_response_id` and `store`. A response is one run: `resp_<run id>`.

`previous_response_id` continues the conversation the earlier response ended with (its
run's turns, as the model saw them, then the new input; its instructions are not carried
over, as OpenAI does). A response made with `store: false` can be neither read nor
continued. Both read only responses the key may see (`agents.access.visible_runs`), else
404.

Streaming sends the typed events (`response.created`, `response.output_item.added`,
`response.output_text.delta`, `response.function_call_arguments.delta`,
`response.output_item.done`, `response.completed`, or `response.failed`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.event_streams import event_stream_response
from agentplatform.v1.chat_completions import (
    answered,
    approval_message,
    run_error,
    started,
    with_images,
)
from agentplatform.v1.chat_request import ChatRequest, json_body, parse_chat_body
from agentplatform.v1.continued import conversation_so_far
from agentplatform.v1.endpoint import (
    OpenAIError,
    allow_method,
    as_api_error,
    authorized,
    openai_errors,
)
from agentplatform.v1.endpoint import (
    parsed as parsed_body,
)
from agentplatform.v1.gateway import gateway_responses, is_gateway_model
from agentplatform.v1.responses_wire import (
    PREFIX,
    ResponseEvents,
    function_call_item,
    is_response_id,
    message_item,
    response_object,
    responses_as_chat,
    responses_param,
    usage_object,
)
from agentplatform.v1.shapes.base import BadRequest
from agents.models import Run
from agents.runs import HEARTBEAT, Ending, Nearby, follow_run, recorded_ending
from agents.runtime.client_request import ClientRequest
from agents.runtime.spec import TERMINAL, RunStatus
from agents.selectors import stored_response_run
from base.stream_reads import brief
from providers.runtime.types import UserMessage
from tenancy.authentication import ApiClient
from tenancy.policy import Action, Principal, declares


@dataclass(frozen=True)
class ResponsesRequest:
    body: dict[str, Any]  # the request as a Chat Completions body (without earlier turns)
    previous_id: int | None
    kept: bool  # `store`
    stream: bool


# -- the request ---------------------------------------------------------------------------
def parse_responses_request(body: dict[str, Any]) -> ResponsesRequest:
    chat = responses_as_chat(body)
    previous = body.get("previous_response_id")
    if previous is not None and not is_response_id(previous):
        raise BadRequest("No such response.", "previous_response_id")
    store = body.get("store", True)  # (a boolean: responses_as_chat checked it)
    stream = body.get("stream", False)
    return ResponsesRequest(
        body=chat,
        previous_id=int(previous[5:]) if previous else None,
        kept=store,
        stream=stream is True,
    )


def _conversation_so_far(client: ApiClient, previous_id: int) -> list[dict[str, Any]]:
    """The turns a previous response's run ended with, as Chat Completions messages."""
    param = "previous_response_id"
    return conversation_so_far(
        client,
        previous_id,
        unknown=OpenAIError(404, f"No response {PREFIX}{previous_id}.", param=param),
        unfinished=OpenAIError(
            400, f"Response {PREFIX}{previous_id} has not finished yet.", param=param
        ),
    )


def _prepared(client: ApiClient, parsed: ResponsesRequest) -> ChatRequest:
    """The request as a chat (after the earlier turns, if any)."""
    body = parsed.body
    if parsed.previous_id is not None:
        earlier = _conversation_so_far(client, parsed.previous_id)
        body = {**body, "messages": [*earlier, *body["messages"]]}
    try:
        chat = parse_chat_body(body)
    except BadRequest as exc:
        raise OpenAIError(400, str(exc), param=responses_param(exc.param)) from None
    if not parsed.kept:
        client_request = chat.client or ClientRequest(messages=(UserMessage(chat.input),))
        chat = replace(chat, client=replace(client_request, kept=False))
    return chat


# -- rendering -------------------------------------------------------------------------------
def _usage(ending: Ending | None) -> dict[str, Any] | None:
    if ending is None:
        return None
    return usage_object(ending.prompt_tokens, ending.completion_tokens)


def _call_items(ending: Ending) -> list[dict[str, Any]]:
    return [
        function_call_item(
            call["id"], call["name"], json.dumps(call["arguments"], ensure_ascii=False)
        )
        for call in ending.tool_calls
    ]


def _output(request: HttpRequest, run: Run, ending: Ending) -> list[dict[str, Any]]:
    text = ending.output
    if ending.approvals:
        note = approval_message(request, run.pk, ending.approvals)
        text = f"{text}\n\n{note}" if text else note
    items = [message_item(f"msg_{run.pk}", text)] if text else []
    return items + _call_items(ending)


def _response(
    run: Run, model: str, *, status: str, output: list[dict[str, Any]], ending: Ending | None
) -> dict[str, Any]:
    incomplete = None
    if ending is not None and ending.status == RunStatus.MAX_ROUNDS:
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    return response_object(
        f"{PREFIX}{run.pk}",
        int(run.created_at.timestamp()),
        model,
        status=status,
        output=output,
        usage=_usage(ending),
        incomplete=incomplete,
    )


def _model_name(run: Run) -> str:
    return run.agent.slug if run.agent_id and run.agent else ""


# -- views -----------------------------------------------------------------------------------
@declares(Action.START_RUN, methods=("POST",))
@openai_errors
async def responses(request: HttpRequest) -> HttpResponse:
    allow_method(request, "POST")
    client = await authorized(request, Action.START_RUN)  # before any work for the body
    body = await parsed_body(json_body, request.body)
    if is_gateway_model(body):
        return await gateway_responses(request, body, client)
    return await agent_response(request, body, client)


async def agent_response(request: HttpRequest, body: Any, client: ApiClient) -> HttpResponse:
    """A run of the agent or crew the body names, answered as a Response."""
    parsed = await parsed_body(parse_responses_request, body, size=len(request.body))
    chat = await brief(_prepared)(client, parsed)
    if chat.fetches_images:
        chat = await with_images(chat)
    try:
        run, nearby = await started(client, chat)
    except (ValidationError, BadRequest) as exc:  # named as a Responses body names them
        error = as_api_error(exc)
        assert error is not None
        raise OpenAIError(400, error.message, param=responses_param(error.param)) from None
    headers = {"X-Run-Id": str(run.pk)}
    if parsed.stream:
        return event_stream_response(_events(request, run, chat, nearby), headers=headers)
    ending = await answered(run, nearby)
    body = _response(
        run, chat.model, status="completed", output=_output(request, run, ending), ending=ending
    )
    response = JsonResponse(body)
    response["X-Run-Id"] = str(run.pk)
    return response


async def _events(
    request: HttpRequest, run: Run, chat: ChatRequest, nearby: Nearby
) -> AsyncIterator[bytes]:
    stream = ResponseEvents(message_id=f"msg_{run.pk}")
    model = chat.model
    yield stream.begin(_response(run, model, status="in_progress", output=[], ending=None))
    text: list[str] = []
    async with aclosing(follow_run(run, execute=lambda: nearby.start(run))) as progress:
        async for item in progress:
            if item is HEARTBEAT:
                yield b": keep-alive\n\n"
            elif isinstance(item, str) and not chat.structured:
                text.append(item)
                yield stream.text(item)
            elif isinstance(item, Ending):
                if item.failed:
                    failed = _response(run, model, status="failed", output=[], ending=item)
                    failed["error"] = {
                        "code": "server_error",
                        "message": run_error(run.pk, item).message,
                    }
                    yield stream.failed(failed)
                    return
                output = _output(request, run, item)
                message = next((o for o in output if o["type"] == "message"), None)
                if message is not None:
                    # (the final text, after what streamed when it starts so; else all of it)
                    full, streamed = message["content"][0]["text"], "".join(text)
                    rest = full[len(streamed) :] if full.startswith(streamed) else full
                    if rest:
                        yield stream.text(rest)
                    yield stream.close_message(full)
                for call in (o for o in output if o["type"] == "function_call"):
                    yield stream.call(call["call_id"], call["call_id"], call["name"])
                    yield stream.arguments(call["call_id"], call["arguments"])
                yield stream.finish()
                yield stream.completed(
                    _response(run, model, status="completed", output=output, ending=item)
                )


def _stored_response(request: HttpRequest, client: ApiClient, response_id: str) -> dict[str, Any]:
    run = None
    if is_response_id(response_id):
        principal = Principal.of_key(client.api_key)
        run = stored_response_run(principal=principal, run_id=int(response_id[5:]))
    if run is None:
        raise OpenAIError(404, f"No response {response_id}.", code="not_found")
    model = _model_name(run)
    if run.status not in TERMINAL and run.status != RunStatus.AWAITING_APPROVAL:
        return _response(run, model, status="in_progress", output=[], ending=None)
    ending = recorded_ending(run.pk)
    if ending.failed:
        body = _response(run, model, status="failed", output=[], ending=ending)
        body["error"] = {"code": "server_error", "message": run_error(run.pk, ending).message}
        return body
    return _response(
        run, model, status="completed", output=_output(request, run, ending), ending=ending
    )


@declares(Action.READ_RUN)
@openai_errors
async def response_detail(request: HttpRequest, response_id: str) -> HttpResponse:
    allow_method(request, "GET")
    client = await authorized(request, Action.READ_RUN)
    return JsonResponse(await brief(_stored_response)(request, client, response_id))
