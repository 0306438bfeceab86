"""The `/v1` faces in the OpenAPI document at `/api/schema/`: their operations, whose
request and answer schemas are the wire shapes' own (agentplatform.v1.shapes: the same
models check the requests), turned from JSON Schema into OpenAPI 3.0.

The views are plain async Django views that drf-spectacular cannot see, so a postprocessing
hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) adds them. What is written here by hand
is prose: each operation's summary and description, its examples and which errors it
answers. Cost: the document is built once per process, on first use.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from agentplatform.v1.shapes import chat, common, embeddings, messages, responses
from agentplatform.v1.shapes.base import REF
from agentplatform.v1.shapes.chat import (
    MAX_CONVERSATION_CHARS,
    MAX_IMAGE_MB,
    MAX_MESSAGES,
    MAX_TOOLS,
)
from agentplatform.v1.shapes.messages import ANTHROPIC_ERROR_TYPES
from agents.models import MAX_INPUT_CHARS
from providers.runtime.images import MAX_IMAGES

TAG = "OpenAI-compatible"
ANTHROPIC_TAG = "Anthropic-compatible"
SECURITY_SCHEME = "ApiKey"  # agentplatform.api.schema.ApiKeyScheme: the tenant API key
X_API_KEY_SCHEME = "XApiKey"  # the same key as `x-api-key`, as the anthropic SDK sends it
SHAPES: tuple[type[BaseModel], ...] = (
    common.OpenAIError,
    common.OpenAIModelList,
    chat.ChatCompletionRequest,
    chat.ChatTool,
    chat.ChatResponseFormat,
    chat.ChatToolCall,
    chat.ChatCompletion,
    chat.ChatCompletionChunk,
    chat.ChatCompletionStreamEvent,
    responses.ResponsesRequest,
    responses.ResponsesTool,
    responses.ResponsesNamedTool,
    responses.ResponsesText,
    responses.Response,
    responses.ResponseEvent,
    responses.ResponseStreamEvent,
    embeddings.EmbeddingsRequest,
    embeddings.EmbeddingList,
    messages.AnthropicMessagesRequest,
    messages.AnthropicCountTokensRequest,
    messages.AnthropicMessage,
    messages.AnthropicTokenCount,
    messages.AnthropicError,
    messages.AnthropicStreamEvent,
)


# -- JSON Schema (pydantic's, 2020-12) as OpenAPI 3.0 ------------------------------------------
def components() -> dict[str, dict[str, Any]]:
    """Every shape and the shapes they hold, by name, as OpenAPI 3.0 schemas."""
    _, schema = models_json_schema([(shape, "validation") for shape in SHAPES], ref_template=REF)
    return {name: as_openapi(node) for name, node in schema["$defs"].items()}


def as_openapi(node: Any) -> Any:
    """A JSON Schema as OpenAPI 3.0 takes it: `X | None` is `nullable`, a `const` an
    one-value `enum`, a `$ref` stands alone, no titles, no `default: null` where null is not
    allowed."""
    if isinstance(node, list):
        return [as_openapi(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: as_openapi(value) for key, value in node.items() if key != "title"}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    options = node.get("anyOf")
    if options and {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        del node["anyOf"]
        if len(rest) == 1:
            node = {**_standalone(rest[0]), **node}
        else:
            node["anyOf"] = rest
        node["nullable"] = True
    if "default" in node and node["default"] is None and not node.get("nullable"):
        del node["default"]
    if "$ref" in node and len(node) > 1:
        node = {"allOf": [{"$ref": node.pop("$ref")}], **node}
    return node


def _standalone(option: dict[str, Any]) -> dict[str, Any]:
    return {"allOf": [option]} if "$ref" in option else option


# -- examples ------------------------------------------------------------------------------
def example_of(shape: type[BaseModel]) -> dict[str, Any]:
    return copy.deepcopy(shape.model_config["json_schema_extra"]["example"])  # type: ignore[index]


# A 1x1 PNG, for the examples (a data URL is checked, never fetched).
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    """One example server-sent event, framed as the views frame it."""
    line = f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"
    return f"event: {event}\n{line}" if event else line


def _chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
    chunk = {
        "id": "chatcmpl-42",
        "object": "chat.completion.chunk",
        "created": 1751328000,
        "model": "assistant",
        "system_fingerprint": None,
        "choices": choices,
    }
    return _sse({**chunk, **extra})


def _chunk_choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def chat_stream_example() -> str:
    return (
        _chunk([_chunk_choice({"role": "assistant", "content": ""})])
        + _chunk([_chunk_choice({"content": "It is 42."})])
        + _chunk([_chunk_choice({}, "stop")])
        + _chunk([], usage=example_of(chat.ChatCompletion)["usage"])
        + "data: [DONE]\n\n"
    )


def _response_example(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    example = example_of(responses.Response)
    return {
        **example,
        "status": status,
        "output": output,
        "usage": example["usage"] if status == "completed" else None,
    }


def responses_stream_example() -> str:
    message = example_of(responses.Response)["output"][0]
    text = {"item_id": "msg_42", "output_index": 0, "content_index": 0}
    events = [
        ("response.created", {"response": _response_example("in_progress", [])}),
        ("response.in_progress", {"response": _response_example("in_progress", [])}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": {**message, "status": "in_progress", "content": []}},
        ),
        (
            "response.content_part.added",
            {**text, "part": {"type": "output_text", "text": "", "annotations": []}},
        ),
        ("response.output_text.delta", {**text, "delta": "Let me look.", "logprobs": []}),
        ("response.output_text.done", {**text, "text": "Let me look.", "logprobs": []}),
        ("response.content_part.done", {**text, "part": message["content"][0]}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.completed", {"response": _response_example("completed", [message])}),
    ]
    return "".join(
        _sse({"type": event, "sequence_number": number, **fields}, event)
        for number, (event, fields) in enumerate(events, start=1)
    )


def chat_examples() -> dict[str, Any]:
    tool, call = example_of(chat.ChatTool), example_of(chat.ChatToolCall)
    return {
        "simple": {
            "summary": "One question",
            "value": {
                "model": "assistant",
                "messages": [{"role": "user", "content": "What is 6*7?"}],
            },
        },
        "conversation": {
            "summary": "A conversation, streamed with its usage",
            "value": {
                "model": "assistant",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [
                    {"role": "system", "content": "Answer in French."},
                    {"role": "user", "content": "My name is Ada."},
                    {"role": "assistant", "content": "Enchantée, Ada."},
                    {"role": "user", "content": [{"type": "text", "text": "What is my name?"}]},
                ],
            },
        },
        "tool_result": {
            "summary": "The result of the caller's tool, sent back",
            "value": {
                "model": "assistant",
                "tools": [tool],
                "messages": [
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
                ],
            },
        },
        "structured": {
            "summary": "Structured output about an image, with sampling options",
            "value": {
                "model": "assistant",
                "temperature": 0.2,
                "max_completion_tokens": 500,
                "response_format": example_of(chat.ChatResponseFormat),
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Which city is on this picture?"},
                            {"type": "image_url", "image_url": {"url": PIXEL}},
                        ],
                    }
                ],
            },
        },
    }


def responses_examples() -> dict[str, Any]:
    schema = example_of(chat.ChatResponseFormat)["json_schema"]["schema"]
    parameters = example_of(chat.ChatTool)["function"]["parameters"]
    return {
        "simple": {
            "summary": "One question",
            "value": {
                "model": "assistant",
                "instructions": "Answer in one sentence.",
                "input": "What is 6*7?",
            },
        },
        "tools": {
            "summary": "The caller's tool offered, streamed",
            "value": {
                "model": "assistant",
                "stream": True,
                "input": "Weather in Paris?",
                "tools": [
                    {
                        "type": "function",
                        "name": "get_weather",
                        "description": "The weather in a city.",
                        "parameters": parameters,
                    }
                ],
            },
        },
        "continued": {
            "summary": "The tool's result, continuing a response",
            "value": {
                "model": "assistant",
                "previous_response_id": "resp_42",
                "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
            },
        },
        "structured": {
            "summary": "Structured output, not stored",
            "value": {
                "model": "assistant",
                "store": False,
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "Paris?"}]}],
                "text": {"format": {"type": "json_schema", "name": "city", "schema": schema}},
            },
        },
    }


# -- operations ----------------------------------------------------------------------------
_ERROR_EXAMPLES = {
    400: ("The last user message is empty.", "invalid_request_error", "messages", None),
    401: (
        "You didn't provide an API key. Send your tenant API key as `Authorization: Bearer <key>`.",
        "invalid_request_error",
        None,
        "missing_api_key",
    ),
    404: (
        "The model `gpt-4o` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model",
        "model_not_found",
    ),
    413: ("The request body is too large.", "invalid_request_error", None, None),
    429: ("Rate limit reached; retry later.", "requests", None, "rate_limit_exceeded"),
    500: ("Run 42 failed: provider error", "server_error", None, "run_failed"),
}


def _ref(shape: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=shape.__name__)}


def _header(description: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "string"}}


def _json(shape: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(shape)}}}


def _error(
    status: int,
    description: str,
    headers: dict[str, Any] | None = None,
    example: tuple[str, str, str | None, str | None] | None = None,
) -> dict[str, Any]:
    message, type_, param, code = example or _ERROR_EXAMPLES[status]
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref(common.OpenAIError), "example": body}},
    }
    if headers:
        response["headers"] = headers
    return response


def _anthropic_error(status: int, description: str, message: str) -> dict[str, Any]:
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref(messages.AnthropicError), "example": body}},
    }


def _forbidden(scope: str) -> dict[str, Any]:
    message = f"This API key lacks the '{scope}' scope."
    return _error(
        403,
        f"The API key lacks the `{scope}` scope (`insufficient_scope`).",
        example=(message, "invalid_request_error", None, "insufficient_scope"),
    )


RUN_ID = _header("The id of the run this request started (`/api/v1/runs/{id}`).")
UNAUTHORIZED = _error(
    401,
    "Missing (`missing_api_key`), invalid, revoked or expired (`invalid_api_key`) API key.",
    {"WWW-Authenticate": _header('`Bearer realm="api"`')},
)
TOO_MANY = _error(
    429,
    "The key's or the tenant's rate limit is reached (`rate_limit_exceeded`).",
    {"Retry-After": _header("Seconds to wait before retrying.")},
)
TOO_LARGE = _error(413, "The request body is too large.")
RUN_FAILED = _error(
    500,
    "The run failed (`run_failed`) or was cancelled (`run_cancelled`); do not retry, the run "
    "is readable by its id.",
    {"X-Run-Id": RUN_ID, "x-should-retry": _header("`false`: a retry starts another run.")},
)

BAD_CHAT = (
    "The body is not a valid request (`param` names the field): not a JSON object; no "
    "`model` (or not valid Unicode); no or empty `messages`, or more than "
    f"{MAX_MESSAGES}; an unknown role or the legacy `function` role; content that is not a "
    "string or a list of text parts (image parts in user messages only); text with NUL "
    "characters; no user message, or an empty last one, or one over "
    f"{MAX_INPUT_CHARS} characters; all messages over {MAX_CONVERSATION_CHARS} characters; "
    "an assistant `tool_calls` entry without `id` and `function` (or with arguments that are "
    "not a JSON object as text); a `tool` message whose `tool_call_id` names no earlier "
    "call, or a call left without its `tool` message; an image that is not a PNG, JPEG, GIF "
    f"or WebP data URL or http(s) URL, over {MAX_IMAGE_MB} MB, one of more than "
    f"{MAX_IMAGES}, or whose URL could not be fetched; `tools` not a list of at most "
    f"{MAX_TOOLS} function tools with unique names and object `parameters` schemas (or a "
    "name the agent's own tools take, or any for a remote agent); a `tool_choice` naming no "
    "tool of `tools`; a `response_format` other than text/json_object/json_schema or whose "
    "schema's root is not an object; `temperature` outside 0..2, `top_p` outside 0..1, "
    "`max_tokens`/`max_completion_tokens` not a positive integer, a bad `stop`, a "
    "non-integer `seed`, `n` other than 1, a `user` over 256 characters, a non-boolean "
    "`stream`, a `stream_options` that is not an object or a non-boolean "
    "`stream_options.include_usage`; for a crew, anything but text turns "
    "(tools, tool calls or results, `response_format`, images); images for an agent whose "
    "connection takes none (the offline demo, a remote agent)."
)

STREAM_DESCRIPTION = """\
With `"stream": true` (or `?stream=true`): server-sent events, one `data: <json>` message \
per chunk, each a `chat.completion.chunk` object (component `ChatCompletionChunk`) with the \
same `id` (`chatcmpl-<run id>`):

1. `{"role": "assistant", "content": ""}` as the first chunk's `delta`;
2. the run's text as it is produced, `{"content": "..."}` (a crew's answer, which streams \
in its members' runs, the JSON of a `response_format` answer and the approval note of a \
parked run come as one chunk at the end);
3. for each call of the caller's `tools`, one chunk whose `delta` is \
`{"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments"}}]}` \
(the whole call at once);
4. a chunk with an empty `delta` and the `finish_reason` (`stop`, `length` or \
`tool_calls`);
5. only with `"stream_options": {"include_usage": true}`: a chunk with `"choices": []` and \
the run's `usage`;
6. `data: [DONE]`.

Comment lines (`: keep-alive`) are sent while the run is quiet. When the run fails or is \
cancelled the stream sends an OpenAI error object instead of the finish chunk \
(`data: {"error": {..., "type": "server_error", "code": "run_failed"}}`), then `[DONE]`.
"""

CHAT_DESCRIPTION = """\
Runs the agent (or crew) named by `model` once, executed server-side like any other run \
(`POST /api/v1/runs`), and answers with its output. Needs the `run` scope. The messages \
reach the agent as the conversation they are: `system` and `developer` messages are added \
to the agent's instructions, assistant `tool_calls` and `tool` results stay what they are, \
user messages may carry images (if the agent's connection takes them: not the offline \
demo, not a remote agent). The agent's own model and tools apply (platform \
tools execute server-side); the caller's `tools` are offered beside them, and a call to one \
of those ends the answer with `finish_reason` `tool_calls` and `message.tool_calls`: the \
caller runs it and sends the result in its next request, a new run (stateless, as OpenAI). \
`response_format` makes the run's output structured (the answer's `content` is its JSON); \
`temperature`, `top_p`, `max_tokens`, `stop` and `seed` apply to this run within the \
agent's limits (Anthropic connections take no temperature, top_p or seed). A crew takes \
text turns only, folded into one text.

A run that parks waiting for a human's approval ends its answer with a note naming the run \
and the URLs where each tool call is approved or rejected (`finish_reason` `stop`). A \
failed or cancelled run is a 500 (`run_failed` / `run_cancelled`, header \
`x-should-retry: false`): retrying would start another run. The response's `X-Run-Id` \
header names the run, which stays readable at `/api/v1/runs/{id}` (and `/events`), also \
when the client goes away.
"""

RESPONSES_STREAM_DESCRIPTION = """\
With `"stream": true`: typed server-sent events, each an `event: <type>` line and a \
`data: <json>` line (component `ResponseStreamEvent`) whose JSON has the same `type` and a \
`sequence_number` counting from 1 (component `ResponseEvent`):

1. `response.created`, then `response.in_progress`, each with the `response` \
(`in_progress`, no output);
2. for the message: `response.output_item.added` (the message `in_progress`, no content), \
`response.content_part.added`, a `response.output_text.delta` per piece of text as the run \
produces it (the JSON of a `text.format` answer and the approval note of a parked run come \
as one delta at the end), `response.output_text.done`, `response.content_part.done`, \
`response.output_item.done` (the message);
3. for each call of the caller's `tools`: `response.output_item.added` (the call \
`in_progress`, empty arguments), `response.function_call_arguments.delta` (all the \
arguments), `response.function_call_arguments.done`, `response.output_item.done`;
4. `response.completed` with the whole response.

Comment lines (`: keep-alive`) are sent while the run is quiet. When the run fails or is \
cancelled the stream ends with `response.failed` instead, whose response has `status` \
`failed` and an `error`. There is no `[DONE]`.
"""

RESPONSES_DESCRIPTION = """\
OpenAI's Responses API over the tenant's agents: runs the agent named by `model` once (a \
run like any other, `resp_<run id>`), as `POST /v1/chat/completions` does, and answers \
with a `response` object. Needs the `run` scope. The body is translated into a Chat \
Completions request and checked alike: `input` is a string or items (messages, \
`function_call`, `function_call_output`), `instructions` are added to the agent's own, \
function `tools` end the response with `function_call` output items for the caller to run, \
`text.format` (json_schema / json_object) makes the output structured, sampling options \
apply within the agent's limits. `previous_response_id` continues the conversation of an \
earlier stored response (its turns, not its instructions); `"store": false` makes a \
response that can be neither read back nor continued.

A `model` of `<connection>/<model>` (a gateway model of an OpenAI or OpenAI-compatible \
connection) starts no run: the body is translated into Chat Completions for that connection \
and its answer (or stream) told back as a `response`; nothing is stored \
(`previous_response_id` is a 400), there is no `X-Run-Id`, and a provider's error is an \
error here (its 4xx kept, a 502 `provider_error` for its 5xx or for refusing the \
connection's key).

A run that parks waiting for a human's approval ends its message with a note naming the \
run and the URLs where each call is approved or rejected. A failed or cancelled run is a \
500 (`run_failed` / `run_cancelled`, header `x-should-retry: false`); streamed, it ends \
with `response.failed`. The `X-Run-Id` header names the run (`/api/v1/runs/{id}`).
"""

BAD_RESPONSES = (
    "The body is not a valid request (`param` names the field): not a JSON object; `input` "
    "not a string or a non-empty list of items, or an item of an unsupported type "
    "(`input[<i>]`); `instructions` not a string; a tool that is not a function tool; "
    '`text` not `{"format": {...}}`; `store` not a boolean; a `previous_response_id` that is '
    "not a response id, or of a response that has not finished; and whatever a chat "
    "completion refuses (see `POST /v1/chat/completions`), named by the Responses field "
    "(`input`, `text.format`, `max_output_tokens`, ...); what the agent or crew itself "
    "refuses as the run starts (a crew's text turns only, images for a connection that takes "
    "none, an image URL that cannot be fetched, a tool named as one of the agent's) names "
    "`messages` or `tools`, as a chat completion does."
)


EMBEDDINGS_DESCRIPTION = """\
Embeds texts, as OpenAI's embeddings endpoint: with a model of one of the tenant's \
connections (`<connection>/<model>`, whose service has an embeddings endpoint), or with the \
platform's own `local` or `static` model. Needs the `run` scope, and a key not limited to \
some agents. Each call is recorded as a run of the key (no agent), with the tokens the \
provider counted (an estimate of 4 characters a token for the platform's own models); a \
connection's model is held against the tenant's and the key's quotas before the provider \
is asked (a limit that cannot take it is a 429 `insufficient_quota`).
"""

BAD_EMBEDDINGS = (
    "The body is not a valid request (`param` names the field): not a JSON object; no "
    "`model`; an `input` that is not a non-empty text or a list of at most "
    f"{embeddings.MAX_INPUTS} non-empty texts of at most {embeddings.MAX_INPUT_CHARS} "
    "characters (token arrays are not supported), or holds NUL characters; an "
    "`encoding_format` other than `float` or `base64`; `dimensions` not an integer from 1 to "
    f"{embeddings.MAX_DIMENSIONS}, or other than the platform's own model has."
)

MESSAGES_DESCRIPTION = """\
Anthropic's Messages API over the tenant's agents, so the `anthropic` SDK works unmodified \
(the key as `x-api-key` or as a Bearer token): runs the agent (or crew) named by `model` \
once, as `POST /v1/chat/completions` does, and answers with a `message` (`msg_<run id>`). \
Needs the `run` scope. The body is translated into a Chat Completions request and checked \
alike: `system` is added to the agent's instructions, text, image, `tool_use` and \
`tool_result` blocks become the conversation's turns, custom `tools` end the answer with \
`tool_use` blocks (`stop_reason` `tool_use`) for the caller to run, `tool_choice`, \
`max_tokens`, `stop_sequences`, `temperature` and `top_p` apply within the agent's limits. \
Errors come in Anthropic's shape (`AnthropicError`).

A `model` of `<connection>/<model>` is a gateway model: an Anthropic connection's is sent \
on as it came (its answer and errors are the provider's own), an OpenAI or \
OpenAI-compatible connection's is translated into Chat Completions and its answer back into \
a `message`; no run, no `X-Run-Id`.

A run that parks waiting for a human's approval ends its text with a note naming the run \
and the URLs where each call is approved or rejected. A failed or cancelled run is a 500 \
(`api_error`, header `x-should-retry: false`); streamed, it ends with an `error` event.
"""

MESSAGES_STREAM_DESCRIPTION = """\
With `"stream": true`: Anthropic's server-sent events, each an `event: <type>` line and a \
`data: <json>` line with the same `type` (component `AnthropicStreamEvent`): \
`message_start`, then per content block `content_block_start`, `content_block_delta`s and \
`content_block_stop` (the text first, as the run produces it; then each call of the caller's \
tools, its whole input in one `input_json_delta`), then `message_delta` (`stop_reason`, \
usage) and `message_stop`. `ping` events are sent while the run is quiet; a failed or \
cancelled run ends with an `error` event instead.
"""

BAD_MESSAGES = (
    "The body is not a valid request (the message says which field): not a JSON object; no "
    "`model` or `max_tokens`; no or empty `messages`; a role other than `user` or "
    "`assistant`; content that is not a string or a list of blocks, or a block a role does "
    "not take (user: text, image, tool_result; assistant: text, tool_use); an image whose "
    "`source` is neither base64 nor url; a `tool_use` input that is not an object; a "
    "`tool_result` whose content is not text; `system` not a string or text blocks; a tool "
    "that is not a custom tool; a `tool_choice` other than auto, any, tool (with a `name`) "
    "or none; `stream` not a boolean; and whatever a chat completion refuses (see "
    "`POST /v1/chat/completions`)."
)


INPUT_EXAMPLE = embeddings.INPUT
MESSAGES_TOOL_EXAMPLE = {
    "model": "assistant",
    "max_tokens": 1024,
    "tools": [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ],
}


def messages_stream_example() -> str:
    message = example_of(messages.AnthropicMessage)
    opening = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    events = [
        ("message_start", {"message": opening}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "It is 42."}}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": message["usage"],
            },
        ),
        ("message_stop", {}),
    ]
    return "".join(_sse({"type": event, **fields}, event) for event, fields in events)


def anthropic_errors(bad: str, *, run: bool) -> dict[str, Any]:
    """The errors of the Messages face, in Anthropic's shape; `run`: it starts one."""
    errors = {
        "400": _anthropic_error(400, bad, "`max_tokens` is required."),
        "401": {
            **_anthropic_error(
                401,
                "Missing, invalid, revoked or expired API key.",
                "Incorrect API key provided: invalid api key.",
            ),
            "headers": {"WWW-Authenticate": _header('`Bearer realm="api"`')},
        },
        "403": _anthropic_error(
            403, "The API key lacks the `run` scope.", "This API key lacks the 'run' scope."
        ),
        "413": _anthropic_error(
            413, "The request body is too large.", "The request body is too large."
        ),
        "429": {
            **_anthropic_error(
                429,
                "The key's or the tenant's rate limit is reached, or a quota cannot take the run.",
                "Rate limit reached; retry later.",
            ),
            "headers": {"Retry-After": _header("Seconds to wait before retrying.")},
        },
    }
    thread = "no message the key may see named by `thread`."
    if run:
        errors["404"] = _anthropic_error(
            404,
            f"No active agent or crew, nor gateway model, named `model`; or {thread}",
            "The model `claude-nope` does not exist or you do not have access to it.",
        )
    else:
        errors["404"] = _anthropic_error(
            404, thread.capitalize(), "`thread`: there is no message msg_42 to continue."
        )
    if run:
        errors["500"] = {
            **_anthropic_error(
                500,
                "The run failed or was cancelled; do not retry, the run is readable by its id.",
                "Run 42 failed: provider error",
            ),
            "headers": {
                "X-Run-Id": RUN_ID,
                "x-should-retry": _header("`false`: a retry starts another run."),
            },
        }
        errors["502"] = _anthropic_error(
            502,
            "A gateway model's provider could not be reached, failed, refused the connection's "
            "key or answered what could not be read.",
            "The provider answered HTTP 500.",
        )
    return errors


def _path_parameter(name: str, description: str, example: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
        "example": example,
    }


def _body(shape: type[BaseModel], examples: dict[str, Any]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {"application/json": {"schema": _ref(shape), "examples": examples}},
    }


def operations() -> dict[str, dict[str, Any]]:
    def operation(operation_id: str, summary: str, description: str, **rest: Any) -> dict:
        return {
            "operationId": operation_id,
            "tags": [TAG],
            "summary": summary,
            "description": description,
            "security": [{SECURITY_SCHEME: []}],
            **rest,
        }

    def anthropic_operation(operation_id: str, summary: str, description: str, **rest: Any):
        return {
            **operation(operation_id, summary, description, **rest),
            "tags": [ANTHROPIC_TAG],
            "security": [{X_API_KEY_SCHEME: []}, {SECURITY_SCHEME: []}],
        }

    return {
        "/v1/models": {
            "get": operation(
                "openai_models_list",
                "List models (the tenant's agents and crews, its gateway models)",
                "The key's tenant's active agents and crews as OpenAI models (`id` = slug), "
                "then, unless the key is limited to agents, its connections' models "
                "(`<connection>/<model>`) and the platform's embedding models (`static`, and "
                "`local` where installed). Needs the `read` scope.",
                responses={
                    "200": _json(common.OpenAIModelList, "The models."),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("read"),
                    "429": TOO_MANY,
                },
            )
        },
        "/v1/models/{model_id}": {
            "get": operation(
                "openai_models_retrieve",
                "Retrieve a model (an agent or crew, or an embedding model)",
                "An active agent of the key's tenant with this slug, else an active crew, "
                "else the platform's embedding model of that name. Needs the `read` scope.",
                parameters=[
                    _path_parameter("model_id", "The agent's or crew's slug.", "assistant")
                ],
                responses={
                    "200": _json(common.OpenAIModel, "The model."),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("read"),
                    "404": _error(
                        404, "No active agent or crew with this slug (`model_not_found`)."
                    ),
                    "429": TOO_MANY,
                },
            )
        },
        "/v1/chat/completions": {
            "post": operation(
                "openai_chat_completions_create",
                "Create a chat completion (run an agent or crew)",
                CHAT_DESCRIPTION,
                parameters=[
                    {
                        "name": "stream",
                        "in": "query",
                        "required": False,
                        "description": '`true` streams as if the body said `"stream": true`; '
                        "any other value leaves it to the body.",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    }
                ],
                requestBody=_body(chat.ChatCompletionRequest, chat_examples()),
                responses={
                    "200": {
                        "description": "The run's answer: a `chat.completion` object, or with "
                        "`stream` a `text/event-stream` of `chat.completion.chunk`s.\n\n"
                        + STREAM_DESCRIPTION,
                        "headers": {"X-Run-Id": {**RUN_ID, "required": True}},
                        "content": {
                            "application/json": {"schema": _ref(chat.ChatCompletion)},
                            "text/event-stream": {
                                "schema": _ref(chat.ChatCompletionStreamEvent),
                                "example": chat_stream_example(),
                            },
                        },
                    },
                    "400": _error(400, BAD_CHAT),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("run"),
                    "404": _error(
                        404, "No active agent or crew named `model` (`model_not_found`)."
                    ),
                    "413": TOO_LARGE,
                    "429": TOO_MANY,
                    "500": RUN_FAILED,
                },
            )
        },
        "/v1/responses": {
            "post": operation(
                "openai_responses_create",
                "Create a response (run an agent)",
                RESPONSES_DESCRIPTION,
                requestBody=_body(responses.ResponsesRequest, responses_examples()),
                responses={
                    "200": {
                        "description": "The run's answer: a `response` object, or with "
                        "`stream` a `text/event-stream` of typed events.\n\n"
                        + RESPONSES_STREAM_DESCRIPTION,
                        "headers": {"X-Run-Id": RUN_ID},  # (not for a gateway model)
                        "content": {
                            "application/json": {"schema": _ref(responses.Response)},
                            "text/event-stream": {
                                "schema": _ref(responses.ResponseStreamEvent),
                                "example": responses_stream_example(),
                            },
                        },
                    },
                    "400": _error(
                        400,
                        BAD_RESPONSES,
                        example=(
                            "Input items of type 'web_search_call' are not supported.",
                            "invalid_request_error",
                            "input[0]",
                            None,
                        ),
                    ),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("run"),
                    "404": _error(
                        404,
                        "No active agent or crew named `model` (`model_not_found`), or no "
                        "`previous_response_id` the key may read (not stored, another's, a "
                        "crew's; `param` `previous_response_id`).",
                    ),
                    "413": TOO_LARGE,
                    "429": TOO_MANY,
                    "500": RUN_FAILED,
                    "502": _error(
                        502,
                        "A gateway model's provider could not be reached, failed, refused the "
                        "connection's key or answered what could not be read "
                        "(`provider_error`).",
                        example=(
                            "The provider answered HTTP 500.",
                            "server_error",
                            None,
                            "provider_error",
                        ),
                    ),
                },
            )
        },
        "/v1/embeddings": {
            "post": operation(
                "openai_embeddings_create",
                "Create embeddings",
                EMBEDDINGS_DESCRIPTION,
                requestBody=_body(
                    embeddings.EmbeddingsRequest,
                    {
                        "static": {
                            "summary": "Two texts, the platform's static model",
                            "value": example_of(embeddings.EmbeddingsRequest),
                        },
                        "connection": {
                            "summary": "A connection's model, base64 vectors",
                            "value": {
                                "model": "openai/text-embedding-3-small",
                                "input": "A cat sat on the mat.",
                                "encoding_format": "base64",
                            },
                        },
                    },
                ),
                responses={
                    "200": _json(embeddings.EmbeddingList, "The vectors."),
                    "400": _error(
                        400,
                        BAD_EMBEDDINGS,
                        example=(INPUT_EXAMPLE, "invalid_request_error", "input", None),
                    ),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("run"),
                    "404": _error(
                        404,
                        "No such connection model with embeddings (`model_not_found`).",
                    ),
                    "413": TOO_LARGE,
                    "429": _error(
                        429,
                        "The key's or the tenant's rate limit is reached "
                        "(`rate_limit_exceeded`), or a quota cannot take the call "
                        "(`quota_exceeded`, type `insufficient_quota`).",
                        {"Retry-After": _header("Seconds to wait before retrying.")},
                    ),
                    "502": _error(
                        502,
                        "The connection's provider failed.",
                        example=(
                            "The provider failed: HTTP 500",
                            "server_error",
                            None,
                            None,
                        ),
                    ),
                    "503": _error(
                        503,
                        "The `local` model is not installed here, or failed to load.",
                        example=(
                            "The local embedding model is not installed.",
                            "server_error",
                            None,
                            None,
                        ),
                    ),
                },
            )
        },
        "/v1/messages": {
            "post": anthropic_operation(
                "anthropic_messages_create",
                "Create a message (run an agent or crew)",
                MESSAGES_DESCRIPTION,
                requestBody=_body(
                    messages.AnthropicMessagesRequest,
                    {
                        "simple": {
                            "summary": "One question",
                            "value": example_of(messages.AnthropicMessagesRequest),
                        },
                        "tool_result": {
                            "summary": "The result of the caller's tool, sent back",
                            "value": MESSAGES_TOOL_EXAMPLE,
                        },
                    },
                ),
                responses={
                    "200": {
                        "description": "The run's answer: a `message`, or with `stream` a "
                        "`text/event-stream` of Anthropic's events.\n\n"
                        + MESSAGES_STREAM_DESCRIPTION,
                        "headers": {"X-Run-Id": RUN_ID},  # (not for a gateway model)
                        "content": {
                            "application/json": {"schema": _ref(messages.AnthropicMessage)},
                            "text/event-stream": {
                                "schema": _ref(messages.AnthropicStreamEvent),
                                "example": messages_stream_example(),
                            },
                        },
                    },
                    **anthropic_errors(BAD_MESSAGES, run=True),
                },
            )
        },
        "/v1/messages/count_tokens": {
            "post": anthropic_operation(
                "anthropic_messages_count_tokens",
                "Count a message's tokens (roughly; no run)",
                "What the model would read of this request (the agent's added instructions "
                "aside), counted roughly: 4 characters a token. Needs the `run` scope; the "
                "body is checked as `POST /v1/messages` checks it (`max_tokens` not needed).",
                requestBody=_body(
                    messages.AnthropicCountTokensRequest,
                    {
                        "simple": {
                            "summary": "One question",
                            "value": {
                                "model": "assistant",
                                "messages": [{"role": "user", "content": "What is 6*7?"}],
                            },
                        }
                    },
                ),
                responses={
                    "200": _json(messages.AnthropicTokenCount, "The count."),
                    **anthropic_errors(BAD_MESSAGES, run=False),
                },
            )
        },
        "/v1/responses/{response_id}": {
            "get": operation(
                "openai_responses_retrieve",
                "Retrieve a response",
                "A response as its run stands now: `in_progress` (no output yet) while the "
                "run goes on, else as it ended (`completed`, `incomplete`, or `failed` with "
                "its `error`). Needs the `read` scope; only responses of agents (a gateway "
                "model's are not stored), stored (not `store: false`), and of runs the key "
                "may read (its own, or every run for an admin's key).",
                parameters=[
                    _path_parameter(
                        "response_id", "`resp_<run id>`, as the response's `id`.", "resp_42"
                    )
                ],
                responses={
                    "200": _json(responses.Response, "The response."),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("read"),
                    "404": _error(
                        404,
                        "No such response the key may read (`not_found`).",
                        example=(
                            "No response resp_42.",
                            "invalid_request_error",
                            None,
                            "not_found",
                        ),
                    ),
                    "429": TOO_MANY,
                },
            )
        },
    }


@functools.cache
def _document() -> tuple[dict[str, Any], dict[str, Any]]:
    return operations(), components()


def add_v1_operations(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: document the `/v1` OpenAI-compatible faces."""
    paths, schemas = copy.deepcopy(_document())
    result.setdefault("paths", {}).update(paths)
    result.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
    schemes = result["components"].setdefault("securitySchemes", {})
    schemes[X_API_KEY_SCHEME] = {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "The tenant API key as the anthropic SDK sends it (`/v1/messages`).",
    }
    tags = result.setdefault("tags", [])
    for name, description in (
        (
            TAG,
            "Any OpenAI client pointed at `https://<host>/v1` with a tenant API key: models "
            "are the tenant's agents and crews, a chat completion or a response runs one of "
            "them; embeddings come from a connection's model or the platform's own.",
        ),
        (
            ANTHROPIC_TAG,
            "The anthropic SDK pointed at `https://<host>` with a tenant API key: a message "
            "runs one of the tenant's agents or crews.",
        ),
    ):
        if not any(tag.get("name") == name for tag in tags):
            tags.append({"name": name, "description": description})
    return result
