"""OpenAI's Responses API for a tenant's agents: `POST /v1/responses`, `GET /v1/responses/{id}`.

What openai-agents' default model class and Codex-style clients speak. A request is
translated into a Chat Completions body and checked by the same parser
(`openai_chat_request`), so both faces accept and refuse the same things: `input` (text or
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
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.api.openai_base import (
    OpenAIError,
    allow_method,
    as_api_error,
    authorized,
    openai_errors,
)
from agentplatform.api.openai_chat_request import (
    BadRequest,
    ChatRequest,
    json_body,
    parse_chat_body,
)
from agentplatform.api.openai_compat import (
    answered,
    approval_message,
    run_error,
    started,
    with_images,
)
from agentplatform.api.openai_compat import (
    parsed as parsed_body,
)
from agentplatform.api.sse import event_stream_response, sse_message
from agentplatform.stream_reads import brief
from agentplatform.tenancy.authentication import ApiClient
from agentplatform.tenancy.policy import Action, Principal, declares
from agents.access import visible_runs
from agents.models import Run
from agents.run_reader import HEARTBEAT, Ending, follow_run, recorded_ending
from agents.runtime.client_request import ClientRequest
from agents.runtime.spec import TERMINAL, RunStatus
from agents.runtime.state import RunState
from agents.worker_runs import Nearby
from providers.runtime.openai_adapter import to_openai_messages
from providers.runtime.types import UserMessage

PREFIX = "resp_"
# Not made with `store: false` (only that is stored: {"kept": false}).
_KEPT = Q(client_request__isnull=True) | ~Q(client_request__has_key="kept")
# Their names in a Chat Completions body -> in a Responses body, for the errors' `param`.
_PARAMS = {"messages": "input", "response_format": "text.format", "max_tokens": "max_output_tokens"}


@dataclass(frozen=True)
class ResponsesRequest:
    body: dict[str, Any]  # the request as a Chat Completions body (without earlier turns)
    previous_id: int | None
    kept: bool  # `store`
    stream: bool


# -- the request ---------------------------------------------------------------------------
def parse_responses_request(raw: bytes) -> ResponsesRequest:
    body = json_body(raw)
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("`instructions` must be a string.", "instructions")
        messages.append({"role": "developer", "content": instructions})
    messages += _input_messages(body.get("input"))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for name in ("temperature", "top_p", "user", "stream"):
        if name in body:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    text = body.get("text")
    if text is not None:
        format = text.get("format") if isinstance(text, dict) else None
        if not isinstance(format, dict):
            raise BadRequest('`text` must be {"format": {...}}.', "text")
        chat["response_format"] = _response_format(format)
    previous = body.get("previous_response_id")
    if previous is not None and not _is_response_id(previous):
        raise BadRequest("No such response.", "previous_response_id")
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise BadRequest("`store` must be a boolean.", "store")
    stream = body.get("stream", False)
    return ResponsesRequest(
        body=chat,
        previous_id=int(previous[5:]) if previous else None,
        kept=store,
        stream=stream is True,
    )


def _is_response_id(value: Any) -> bool:
    """`resp_<run id>`, the id plain ASCII digits of a size a run's id can have."""
    digits = value[len(PREFIX) :] if isinstance(value, str) and value.startswith(PREFIX) else ""
    return digits.isascii() and digits.isdigit() and len(digits) < 19


def _input_messages(raw: Any) -> list[dict[str, Any]]:
    """`input` as Chat Completions messages: consecutive function calls join one assistant
    message, as Chat Completions carries them."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise BadRequest("`input` must be a string or a non-empty list of items.", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            messages.append({"role": item.get("role"), "content": _content(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "tool_calls": [call], "_calls": True})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": output}
            )
        elif kind == "reasoning":
            continue  # (no reasoning is carried between turns here)
        else:
            raise BadRequest(f"Input items of type {kind!r} are not supported.", f"input[{index}]")
    for message in messages:
        message.pop("_calls", None)
    return messages


def _content(content: Any) -> Any:
    """Responses content parts as Chat Completions parts (`input_image` -> `image_url`)."""
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url")}})
        else:
            parts.append(part)
    return parts


def _tools(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise BadRequest("`tools` must be a list.", "tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise BadRequest(
                f"Only function tools are supported (not {kind!r}): the agent's own tools run "
                "on the platform.",
                f"tools[{index}]",
            )
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(raw: Any) -> Any:
    if isinstance(raw, dict) and raw.get("type") == "function":
        return {"type": "function", "function": {"name": raw.get("name")}}
    return raw


def _response_format(format: dict[str, Any]) -> dict[str, Any]:
    if format.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"schema": format.get("schema")}}
    return format


def _conversation_so_far(client: ApiClient, previous_id: int) -> list[dict[str, Any]]:
    """The turns a previous response's run ended with, as Chat Completions messages."""
    run = (
        visible_runs(Principal.of_key(client.api_key))
        .filter(pk=previous_id, agent__isnull=False, parent__isnull=True)
        .filter(_KEPT)
        .first()
    )
    if run is None:
        raise OpenAIError(404, f"No response {PREFIX}{previous_id}.", param="previous_response_id")
    if run.status not in TERMINAL or not run.state:
        raise OpenAIError(
            400,
            f"Response {PREFIX}{previous_id} has not finished yet.",
            param="previous_response_id",
        )
    return to_openai_messages(RunState.from_dict(run.state).messages)


def _param(param: str | None) -> str | None:
    """A Chat Completions body's field as the Responses body names it."""
    for chat_name, name in _PARAMS.items():
        if param and param.startswith(chat_name):
            return name + param[len(chat_name) :]
    return param


def _prepared(client: ApiClient, parsed: ResponsesRequest) -> ChatRequest:
    """The request as a chat (after the earlier turns, if any)."""
    body = parsed.body
    if parsed.previous_id is not None:
        earlier = _conversation_so_far(client, parsed.previous_id)
        body = {**body, "messages": [*earlier, *body["messages"]]}
    try:
        chat = parse_chat_body(body)
    except BadRequest as exc:
        raise OpenAIError(400, str(exc), param=_param(exc.param)) from None
    if not parsed.kept:
        client_request = chat.client or ClientRequest(messages=(UserMessage(chat.input),))
        chat = replace(chat, client=replace(client_request, kept=False))
    return chat


# -- rendering -------------------------------------------------------------------------------
def _usage(ending: Ending | None) -> dict[str, Any] | None:
    if ending is None:
        return None
    return {
        "input_tokens": ending.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": ending.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": ending.prompt_tokens + ending.completion_tokens,
    }


def _message_item(run: Run, text: str, status: str = "completed") -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    )
    return {
        "type": "message",
        "id": f"msg_{run.pk}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _call_items(ending: Ending) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "id": f"fc_{call['id']}",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": json.dumps(call["arguments"], ensure_ascii=False),
            "status": "completed",
        }
        for call in ending.tool_calls
    ]


def _output(request: HttpRequest, run: Run, ending: Ending) -> list[dict[str, Any]]:
    text = ending.output
    if ending.approvals:
        note = approval_message(request, run.pk, ending.approvals)
        text = f"{text}\n\n{note}" if text else note
    items = [_message_item(run, text)] if text else []
    return items + _call_items(ending)


def _response(
    run: Run, model: str, *, status: str, output: list[dict[str, Any]], ending: Ending | None
) -> dict[str, Any]:
    incomplete = None
    if ending is not None and ending.status == RunStatus.MAX_ROUNDS:
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    return {
        "id": f"{PREFIX}{run.pk}",
        "object": "response",
        "created_at": int(run.created_at.timestamp()),
        "status": status,
        "model": model,
        "output": output,
        "usage": _usage(ending),
        "error": None,
        "incomplete_details": incomplete,
        "instructions": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "metadata": {},
        "text": {"format": {"type": "text"}},
    }


def _model_name(run: Run) -> str:
    return run.agent.slug if run.agent_id and run.agent else ""


# -- views -----------------------------------------------------------------------------------
@declares(Action.START_RUN, methods=("POST",))
@openai_errors
async def responses(request: HttpRequest) -> HttpResponse:
    allow_method(request, "POST")
    client = await authorized(request, Action.START_RUN)  # before any work for the body
    parsed = await parsed_body(parse_responses_request, request.body)
    chat = await brief(_prepared)(client, parsed)
    if chat.fetches_images:
        chat = await with_images(chat)
    try:
        run, nearby = await started(client, chat)
    except (ValidationError, BadRequest) as exc:  # named as a Responses body names them
        error = as_api_error(exc)
        assert error is not None
        raise OpenAIError(400, error.message, param=_param(error.param)) from None
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


class _Events:
    """The typed stream events, numbered."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, type: str, **fields: Any) -> bytes:
        self.seq += 1
        return sse_message({"type": type, "sequence_number": self.seq, **fields}, event=type)


async def _events(
    request: HttpRequest, run: Run, chat: ChatRequest, nearby: Nearby
) -> AsyncIterator[bytes]:
    event = _Events()
    model = chat.model
    yield event(
        "response.created",
        response=_response(run, model, status="in_progress", output=[], ending=None),
    )
    yield event(
        "response.in_progress",
        response=_response(run, model, status="in_progress", output=[], ending=None),
    )
    item_id, text, opened = f"msg_{run.pk}", [], False

    def open_message() -> list[bytes]:
        return [
            event(
                "response.output_item.added",
                output_index=0,
                item=_message_item(run, "", status="in_progress"),
            ),
            event(
                "response.content_part.added",
                item_id=item_id,
                output_index=0,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            ),
        ]

    def delta(piece: str) -> bytes:
        return event(
            "response.output_text.delta",
            item_id=item_id,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[],
        )

    async with aclosing(follow_run(run, execute=lambda: nearby.start(run))) as progress:
        async for item in progress:
            if item is HEARTBEAT:
                yield b": keep-alive\n\n"
            elif isinstance(item, str) and not chat.structured:
                if not opened:
                    opened = True
                    for message in open_message():
                        yield message
                text.append(item)
                yield delta(item)
            elif isinstance(item, Ending):
                if item.failed:
                    failed = _response(run, model, status="failed", output=[], ending=item)
                    failed["error"] = {
                        "code": "server_error",
                        "message": run_error(run.pk, item).message,
                    }
                    yield event("response.failed", response=failed)
                    return
                output = _output(request, run, item)
                message = next((o for o in output if o["type"] == "message"), None)
                if message is not None:
                    full = message["content"][0]["text"]
                    if not opened:
                        opened = True
                        for opening in open_message():
                            yield opening
                    rest = full[len("".join(text)) :] if full.startswith("".join(text)) else full
                    if rest:
                        yield delta(rest)
                    part = {"type": "output_text", "text": full, "annotations": []}
                    yield event(
                        "response.output_text.done",
                        item_id=item_id, output_index=0, content_index=0, text=full, logprobs=[],
                    )  # fmt: skip
                    yield event(
                        "response.content_part.done",
                        item_id=item_id, output_index=0, content_index=0, part=part,
                    )  # fmt: skip
                    yield event("response.output_item.done", output_index=0, item=message)
                calls = [o for o in output if o["type"] == "function_call"]
                for index, call in enumerate(calls, start=1 if message else 0):
                    yield event(
                        "response.output_item.added",
                        output_index=index,
                        item={**call, "arguments": "", "status": "in_progress"},
                    )
                    yield event(
                        "response.function_call_arguments.delta",
                        item_id=call["id"], output_index=index, delta=call["arguments"],
                    )  # fmt: skip
                    yield event(
                        "response.function_call_arguments.done",
                        item_id=call["id"], output_index=index, arguments=call["arguments"],
                    )  # fmt: skip
                    yield event("response.output_item.done", output_index=index, item=call)
                yield event(
                    "response.completed",
                    response=_response(run, model, status="completed", output=output, ending=item),
                )


def _stored_response(request: HttpRequest, client: ApiClient, response_id: str) -> dict[str, Any]:
    run = None
    if _is_response_id(response_id):
        run = (
            visible_runs(Principal.of_key(client.api_key))
            .filter(pk=int(response_id[5:]), agent__isnull=False, parent__isnull=True)
            .filter(_KEPT)
            .select_related("agent")
            .first()
        )
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
