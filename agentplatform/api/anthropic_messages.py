"""Anthropic's Messages API for a tenant's agents: `POST /v1/messages` and
`POST /v1/messages/count_tokens`, so the `anthropic` SDK works against the platform
unmodified (its key as `x-api-key` or a Bearer token).

A request is translated into a Chat Completions body and checked by the same parser as
`/v1/chat/completions` (`openai_chat_request`): `system`, messages with text, image,
`tool_use` and `tool_result` blocks, `tools`, `tool_choice`, `max_tokens`,
`stop_sequences`, `temperature`, `top_p`, `metadata.user_id`. The answer comes in
Anthropic's shape (`msg_<run id>`, content blocks, `stop_reason` `end_turn`, `tool_use` or
`max_tokens`), streamed as Anthropic streams (`message_start`, `content_block_start`,
`content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`), and errors
in Anthropic's error shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from functools import partial
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.api.gateway import gateway_messages, is_gateway_model
from agentplatform.api.openai_base import allow_method, authorized, openai_errors
from agentplatform.api.openai_chat_request import (
    BadRequest,
    ChatRequest,
    json_body,
    parse_chat_body,
)
from agentplatform.api.openai_compat import (
    answer_text,
    answered,
    parsed,
    run_error,
    started,
    with_images,
)
from agentplatform.api.sse import event_stream_response, sse_message
from agentplatform.tenancy.policy import Action, declares
from agents.models import Run
from agents.run_reader import HEARTBEAT, Ending, follow_run
from agents.runtime.spec import RunStatus
from agents.worker_runs import Nearby

anthropic_errors = partial(openai_errors, anthropic=True)
_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


# -- the request ---------------------------------------------------------------------------
def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages API body as a Chat Completions body (the shared parser checks the rest)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list):
        texts = [b.get("text") for b in system if isinstance(b, dict) and b.get("type") == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise BadRequest("A `system` text block needs a `text` string.", "system")
        system = "\n\n".join(texts)
    if system is not None:
        if not isinstance(system, str):
            raise BadRequest("`system` must be a string or a list of text blocks.", "system")
        messages.append({"role": "system", "content": system})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("`messages` must be a non-empty list.", "messages")
    for index, message in enumerate(raw):
        messages += _turn(message, f"messages.{index}")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise BadRequest("`max_tokens` is required.", "max_tokens")
    chat["max_tokens"] = max_tokens
    for name, chat_name in (("temperature", "temperature"), ("top_p", "top_p"),
                            ("stop_sequences", "stop"), ("stream", "stream")):  # fmt: skip
        if body.get(name) is not None:
            chat[chat_name] = body[name]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id") is not None:
        chat["user"] = metadata["user_id"]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    return chat


def _turn(message: Any, param: str) -> list[dict[str, Any]]:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise BadRequest("Each message's `role` must be `user` or `assistant`.", f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequest("`content` must be a string or a list of blocks.", f"{param}.content")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{param}.content.{index}"
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text")})
        elif kind == "image" and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, where)}})
        elif kind == "tool_use" and role == "assistant":
            arguments = block.get("input")
            if not isinstance(arguments, dict):
                raise BadRequest("A `tool_use` block's `input` must be an object.", where)
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": json.dumps(arguments)},
                }
            )
        elif kind == "tool_result" and role == "user":
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _result_text(block.get("content"), block.get("is_error"), where),
                }
            )
        else:
            raise BadRequest(
                f"Blocks of type {kind!r} are not supported in {role} messages.", where
            )
    if role == "assistant":
        return [{"role": "assistant", "content": parts or None, "tool_calls": calls or None}]
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _image_url(block: dict[str, Any], param: str) -> str:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if isinstance(source, dict) and source.get("type") == "url":
        return source.get("url") or ""
    raise BadRequest("An image block's `source` must be base64 or url.", param)


def _result_text(content: Any, is_error: Any, param: str) -> str:
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" for b in content
    ):
        text = "\n".join(str(b.get("text", "")) for b in content)
    else:
        raise BadRequest("A `tool_result` block's content must be text.", param)
    return f"error: {text}" if is_error else text


def _tools(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise BadRequest("`tools` must be a list.", "tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict) or "input_schema" not in tool:
            raise BadRequest(
                "Only custom tools (name, description, input_schema) are supported.",
                f"tools.{index}",
            )
        function = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(raw: Any) -> Any:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind in _TOOL_CHOICE:
        return _TOOL_CHOICE[kind]
    if kind == "tool":
        return {"type": "function", "function": {"name": raw.get("name")}}
    raise BadRequest("`tool_choice.type` must be auto, any, tool or none.", "tool_choice")


def _prepared(body: dict[str, Any]) -> ChatRequest:
    return parse_chat_body(chat_body(body))


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
    return {
        "id": f"msg_{run.pk}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        **fields,
    }


@declares(Action.START_RUN, methods=("POST",))
@anthropic_errors
async def messages(request: HttpRequest) -> HttpResponse:
    allow_method(request, "POST")
    _key_from_x_api_key(request)
    client = await authorized(request, Action.START_RUN)  # before any work for the body
    body = await parsed(json_body, request.body)
    if is_gateway_model(body):
        return await gateway_messages(request, body, client)
    chat = await parsed(_prepared, body, size=len(request.body))
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


def _event(type: str, **fields: Any) -> bytes:
    return sse_message({"type": type, **fields}, event=type)


async def _events(
    request: HttpRequest, run: Run, chat: ChatRequest, nearby: Nearby
) -> AsyncIterator[bytes]:
    yield _event("message_start", message=_message(run, chat.model, []))
    index, streamed, text_open = 0, [], False
    async with aclosing(follow_run(run, execute=lambda: nearby.start(run))) as progress:
        async for item in progress:
            if item is HEARTBEAT:
                yield _event("ping")
            elif isinstance(item, str):
                if not text_open:
                    text_open = True
                    block = {"type": "text", "text": ""}
                    yield _event("content_block_start", index=index, content_block=block)
                streamed.append(item)
                delta = {"type": "text_delta", "text": item}
                yield _event("content_block_delta", index=index, delta=delta)
            elif isinstance(item, Ending):
                if item.failed:
                    error = run_error(run.pk, item).anthropic_body()
                    yield _event("error", error=error["error"])
                    return
                extra = answer_text(request, run.pk, item, "".join(streamed))
                if extra:
                    if not text_open:
                        text_open = True
                        block = {"type": "text", "text": ""}
                        yield _event("content_block_start", index=index, content_block=block)
                    delta = {"type": "text_delta", "text": extra}
                    yield _event("content_block_delta", index=index, delta=delta)
                if text_open:
                    yield _event("content_block_stop", index=index)
                    index += 1
                for use in _tool_uses(item):
                    block = {**use, "input": {}}
                    yield _event("content_block_start", index=index, content_block=block)
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(use["input"])}
                    yield _event("content_block_delta", index=index, delta=delta)
                    yield _event("content_block_stop", index=index)
                    index += 1
                yield _event(
                    "message_delta",
                    delta={"stop_reason": _stop_reason(item), "stop_sequence": None},
                    usage={
                        "input_tokens": item.prompt_tokens,
                        "output_tokens": item.completion_tokens,
                    },
                )
                yield _event("message_stop")


@declares(Action.START_RUN, methods=("POST",))
@anthropic_errors
async def count_tokens(request: HttpRequest) -> HttpResponse:
    """A rough count (4 characters a token) of what the model would read; no run."""
    allow_method(request, "POST")
    _key_from_x_api_key(request)
    await authorized(request, Action.START_RUN)
    body = json_body(request.body)
    body.setdefault("max_tokens", 1)
    chat = parse_chat_body(chat_body(body))
    client = chat.client
    texts = [chat.input]
    if client is not None:
        texts = [client.instructions, *(json.dumps(t.parameters) for t in client.tools)]
        texts += [getattr(m, "text", None) or getattr(m, "content", "") for m in client.messages]
    size = sum(map(len, texts))
    return JsonResponse({"input_tokens": max(1, size // 4)})
