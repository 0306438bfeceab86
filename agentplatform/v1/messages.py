"""Anthropic's Messages API for a tenant's agents: `POST /v1/messages` and
`POST /v1/messages/count_tokens`, so the `anthropic` SDK works against the platform
unmodified (its key as `x-api-key` or a Bearer token).

A request is checked block by block by its shape (`AnthropicMessagesRequest`), then
translated into a Chat Completions body and checked by the same parser as
`/v1/chat/completions` (`chat_request`): `system`, messages with text, image,
`tool_use` and `tool_result` blocks, `tools`, `tool_choice`, `max_tokens`,
`stop_sequences`, `temperature`, `top_p`, `metadata.user_id`. The answer comes in
Anthropic's shape (`msg_<run id>`, content blocks, `stop_reason` `end_turn`, `tool_use` or
`max_tokens`), streamed as Anthropic streams (`message_start`, `content_block_start`,
`content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`), and errors
in Anthropic's error shape.

`thread` (ours, not Anthropic's) continues by reference, as `previous_response_id` does on
`/v1/responses`: the body names an earlier answer (`msg_<run id>`) and holds only the new
turn, which follows the turns that answer's run ended with (`agentplatform.v1.continued`:
another key's or tenant's answer is a 404). A gateway model's answers are not stored: a
`thread` there is a 400.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from functools import partial
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.event_streams import event_stream_response
from agentplatform.v1.chat_completions import (
    answer_text,
    answered,
    run_error,
    started,
    with_images,
)
from agentplatform.v1.chat_request import (
    ChatRequest,
    json_body,
    parse_chat_body,
)
from agentplatform.v1.continued import conversation_so_far
from agentplatform.v1.endpoint import (
    OpenAIError,
    allow_method,
    authorized,
    openai_errors,
    parsed,
)
from agentplatform.v1.gateway import gateway_messages, is_gateway_model
from agentplatform.v1.messages_wire import chat_body, message_object, messages_event
from agentplatform.v1.shapes.base import BadRequest
from agentplatform.v1.shapes.messages import (
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from agents.models import Run
from agents.runs import HEARTBEAT, Ending, Nearby, follow_run
from agents.runtime.spec import RunStatus
from base.stream_reads import brief
from tenancy.authentication import ApiClient
from tenancy.policy import Action, declares

anthropic_errors = partial(openai_errors, anthropic=True)
NOT_THREADED = (
    "`thread` is not supported for gateway models (`<connection>/<model>`): their messages "
    "are not stored. Send the whole conversation in `messages`."
)


# -- the request ---------------------------------------------------------------------------
def _prepared(body: dict[str, Any], shape: type[AnthropicMessagesRequest]) -> ChatRequest:
    return parse_chat_body(chat_body(body, shape))


async def _chat_of(
    client: ApiClient,
    body: dict[str, Any],
    size: int,
    shape: type[AnthropicMessagesRequest] = AnthropicMessagesRequest,
) -> ChatRequest:
    """The request as a chat; with a `thread`, after the turns its answer's run ended with
    (read on a thread: the database)."""
    if body.get("thread") is None:
        return await parsed(_prepared, body, shape, size=size)
    chat = await parsed(chat_body, body, shape, size=size)  # (`thread` checked by the shape)
    return await brief(_continued)(client, chat, body["thread"])


def _continued(client: ApiClient, chat: dict[str, Any], thread: str) -> ChatRequest:
    earlier = conversation_so_far(
        client,
        int(thread.removeprefix("msg_")),
        unknown=OpenAIError(404, f"`thread`: there is no message {thread} to continue."),
        unfinished=OpenAIError(400, f"`thread`: message {thread} has not finished yet."),
    )
    return parse_chat_body({**chat, "messages": [*earlier, *chat["messages"]]})


def _key_from_x_api_key(request: HttpRequest) -> None:
    """The anthropic SDK sends its key as `x-api-key` (or as a Bearer token)."""
    key = request.META.get("HTTP_X_API_KEY")
    if key and not request.META.get("HTTP_AUTHORIZATION"):
        request.META["HTTP_AUTHORIZATION"] = f"Bearer {key}"


# -- answering -----------------------------------------------------------------------------
def _stop_reason(ending: Ending) -> str:
    if ending.tool_calls:
        return "tool_use"
    return "max_tokens" if ending.status == RunStatus.MAX_ROUNDS else "end_turn"


def _usage(ending: Ending) -> dict[str, int]:
    return {"input_tokens": ending.prompt_tokens, "output_tokens": ending.completion_tokens}


def _tool_uses(ending: Ending) -> list[dict[str, Any]]:
    return [
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
        for c in ending.tool_calls
    ]


def _message(run: Run, model: str, content: list[dict[str, Any]], **fields: Any) -> dict:
    return message_object(f"msg_{run.pk}", model, content, **fields)


@declares(Action.START_RUN, methods=("POST",))
@anthropic_errors
async def messages(request: HttpRequest) -> HttpResponse:
    allow_method(request, "POST")
    _key_from_x_api_key(request)
    client = await authorized(request, Action.START_RUN)  # before any work for the body
    body = await parsed(json_body, request.body)
    if is_gateway_model(body):
        if body.get("thread") is not None:
            raise BadRequest(NOT_THREADED, "thread")
        return await gateway_messages(request, body, client)
    return await agent_messages(request, body, client)


async def agent_messages(request: HttpRequest, body: Any, client: ApiClient) -> HttpResponse:
    """A run of the agent or crew the body names, answered as a Message."""
    chat = await _chat_of(client, body, len(request.body))
    if chat.fetches_images:
        chat = await with_images(chat)
    run, nearby = await started(client, chat)
    headers = {"X-Run-Id": str(run.pk)}
    if chat.stream:
        return event_stream_response(_events(request, run, chat, nearby), headers=headers)
    ending = await answered(run, nearby)
    text = answer_text(request, run.pk, ending, "")
    content = ([{"type": "text", "text": text}] if text else []) + _tool_uses(ending)
    body = _message(
        run,
        chat.model,
        content,
        stop_reason=_stop_reason(ending),
        usage=_usage(ending),
    )
    response = JsonResponse(body)
    response["X-Run-Id"] = str(run.pk)
    return response


async def _events(
    request: HttpRequest, run: Run, chat: ChatRequest, nearby: Nearby
) -> AsyncIterator[bytes]:
    yield messages_event("message_start", message=_message(run, chat.model, []))
    index, streamed, text_open = 0, [], False
    async with aclosing(follow_run(run, execute=lambda: nearby.start(run))) as progress:
        async for item in progress:
            if item is HEARTBEAT:
                yield messages_event("ping")
            elif isinstance(item, str):
                if not text_open:
                    text_open = True
                    block = {"type": "text", "text": ""}
                    yield messages_event("content_block_start", index=index, content_block=block)
                streamed.append(item)
                delta = {"type": "text_delta", "text": item}
                yield messages_event("content_block_delta", index=index, delta=delta)
            elif isinstance(item, Ending):
                if item.failed:
                    error = run_error(run.pk, item).anthropic_body()
                    yield messages_event("error", error=error["error"])
                    return
                extra = answer_text(request, run.pk, item, "".join(streamed))
                if extra:
                    if not text_open:
                        text_open = True
                        block = {"type": "text", "text": ""}
                        yield messages_event(
                            "content_block_start", index=index, content_block=block
                        )
                    delta = {"type": "text_delta", "text": extra}
                    yield messages_event("content_block_delta", index=index, delta=delta)
                if text_open:
                    yield messages_event("content_block_stop", index=index)
                    index += 1
                for use in _tool_uses(item):
                    block = {**use, "input": {}}
                    yield messages_event("content_block_start", index=index, content_block=block)
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(use["input"])}
                    yield messages_event("content_block_delta", index=index, delta=delta)
                    yield messages_event("content_block_stop", index=index)
                    index += 1
                yield messages_event(
                    "message_delta",
                    delta={"stop_reason": _stop_reason(item), "stop_sequence": None},
                    usage={
                        "input_tokens": item.prompt_tokens,
                        "output_tokens": item.completion_tokens,
                    },
                )
                yield messages_event("message_stop")


@declares(Action.START_RUN, methods=("POST",))
@anthropic_errors
async def count_tokens(request: HttpRequest) -> HttpResponse:
    """A rough count (4 characters a token) of what the model would read; no run."""
    allow_method(request, "POST")
    _key_from_x_api_key(request)
    api_client = await authorized(request, Action.START_RUN)
    body = json_body(request.body)
    chat = await _chat_of(api_client, body, len(request.body), AnthropicCountTokensRequest)
    client = chat.client
    texts = [chat.input]
    if client is not None:
        texts = [client.instructions, *(json.dumps(t.parameters) for t in client.tools)]
        texts += [getattr(m, "text", None) or getattr(m, "content", "") for m in client.messages]
    size = sum(map(len, texts))
    return JsonResponse({"input_tokens": max(1, size // 4)})
