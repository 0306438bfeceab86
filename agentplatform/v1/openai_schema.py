"""The OpenAI-compatible endpoint (`/v1`: agentplatform.v1.chat_completions and
agentplatform.v1.responses) in the OpenAPI schema.

Those views are plain async Django views that drf-spectacular cannot see, so a postprocessing
hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) adds their five operations and the
component schemas below, written after what the views really accept and answer (the
request checks are agentplatform.v1.chat_request's).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agentplatform.v1.chat_request import (
    MAX_CONVERSATION_CHARS,
    MAX_MESSAGES,
    MAX_STOP,
    MAX_TOOLS,
    ROLES,
)
from agents.models import MAX_INPUT_CHARS
from agents.runtime.client_request import MAX_RESPONSE_TOKENS
from providers.runtime.images import MAX_IMAGE_BYTES, MAX_IMAGES
from tools.runtime.tool import NAME_PATTERN

TAG = "OpenAI-compatible"
SECURITY_SCHEME = "ApiKey"  # agentplatform.api.schema.ApiKeyScheme: the tenant API key
MAX_IMAGE_MB = MAX_IMAGE_BYTES // (1024 * 1024)
TOOL_NAME = NAME_PATTERN.pattern
# A 1x1 PNG, for the examples (a data URL is checked, never fetched).
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


RESPONSE_EVENTS = (  # the typed events of a streamed response, in the order they come
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.failed",
)

# -- components --------------------------------------------------------------------------
ERROR_CODES = (
    "`invalid_api_key`, `missing_api_key` (401); `insufficient_scope`, `permission_denied` "
    "(403); `model_not_found`, `not_found`, `unknown_url` (404); `method_not_allowed` (405); "
    "`rate_limit_exceeded` (429); `run_failed`, `run_cancelled` (500); null otherwise "
    "(the 400s, 413, and the 404 of an unknown `previous_response_id`)."
)

MAX_TOKENS_CAP = (
    f"at most the agent's `max_tokens_per_run` ({MAX_RESPONSE_TOKENS} if it has none); "
    "omitted, the agent's own per-response limit applies"
)

_SCHEMA_OBJECT = {
    "type": "object",
    "additionalProperties": True,
    "description": 'A JSON Schema whose root is an object schema (`"type": "object"`, or '
    "no `type`); it must be a usable schema, at most 100,000 characters as JSON.",
}

COMPONENTS: dict[str, dict[str, Any]] = {
    "OpenAIError": {
        "type": "object",
        "description": "OpenAI's error shape, used by every `/v1` error response.",
        "properties": {"error": _ref("OpenAIErrorBody")},
        "required": ["error"],
        "example": {
            "error": {
                "message": "The model `gpt-4o` does not exist or you do not have access to it.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
        },
    },
    "OpenAIErrorBody": {
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "What went wrong, for a human."},
            "type": {
                "type": "string",
                "enum": ["invalid_request_error", "requests", "server_error"],
                "description": "`requests` for a 429, `server_error` for a 500, "
                "`invalid_request_error` for everything else.",
            },
            "param": _nullable(
                {
                    "type": "string",
                    "description": "The request field at fault, e.g. `model`, `messages`, "
                    "`messages[2].content`, `tools[0].function.name`, `temperature` (for "
                    "`/v1/responses`: `input[1]`, `text.format`, `max_output_tokens`, "
                    "`previous_response_id`, ...); else null.",
                }
            ),
            "code": _nullable({"type": "string", "description": ERROR_CODES}),
        },
        "required": ["message", "type", "param", "code"],
    },
    "OpenAIModel": {
        "type": "object",
        "description": "An active agent or crew of the key's tenant, named by its slug.",
        "properties": {
            "id": {"type": "string", "description": "The agent's or crew's slug."},
            "object": {"type": "string", "enum": ["model"]},
            "created": {
                "type": "integer",
                "description": "When the agent or crew was created (Unix seconds).",
            },
            "owned_by": {"type": "string", "description": "The tenant's slug."},
        },
        "required": ["id", "object", "created", "owned_by"],
        "example": {
            "id": "assistant",
            "object": "model",
            "created": 1751328000,
            "owned_by": "acme",
        },
    },
    "OpenAIModelList": {
        "type": "object",
        "description": "The tenant's active agents (by slug), then its active crews whose "
        "slug no agent takes; not paginated.",
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": _ref("OpenAIModel")},
        },
        "required": ["object", "data"],
        "example": {
            "object": "list",
            "data": [
                {"id": "assistant", "object": "model", "created": 1751328000, "owned_by": "acme"},
                {"id": "desk", "object": "model", "created": 1751414400, "owned_by": "acme"},
            ],
        },
    },
    # -- chat completions: the request
    "ChatTextPart": {
        "type": "object",
        "description": "A text content part (the parts' texts are joined by newlines).",
        "properties": {
            "type": {"type": "string", "enum": ["text", "input_text", "output_text"]},
            "text": {"type": "string"},
        },
        "required": ["type", "text"],
    },
    "ChatImagePart": {
        "type": "object",
        "description": "An image, in a `user` message only (elsewhere a 400). `url` is a "
        "data URL (`data:image/<png|jpeg|gif|webp>;base64,...`, checked at once) or an "
        "http(s) URL of at most 2048 characters, fetched through the platform's guarded "
        "egress (no private addresses, redirects re-checked) once the API key is "
        f"checked. PNG, JPEG, GIF or WebP (the bytes must be what they claim), at most "
        f"{MAX_IMAGE_MB} MB each and {MAX_IMAGES} per request. The agent's model connection "
        "must take images: the offline demo connection and remote agents do not, nor do "
        "crews (400).",
        "properties": {
            "type": {"type": "string", "enum": ["image_url", "input_image"]},
            "image_url": {
                "description": '`{"url": "..."}` (a `detail` is ignored), or the URL itself.',
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {
                            "url": {"type": "string", "minLength": 1},
                            "detail": {"type": "string", "description": "Ignored."},
                        },
                        "required": ["url"],
                        "additionalProperties": True,
                    },
                    {"type": "string", "minLength": 1},
                ],
            },
        },
        "required": ["type", "image_url"],
    },
    "ChatContentPart": {
        "description": "A content part: text, or (in `user` messages) an image. Any other "
        "part type (audio, files, ...) is a 400.",
        "oneOf": [_ref("ChatTextPart"), _ref("ChatImagePart")],
    },
    "ChatToolCall": {
        "type": "object",
        "description": "A call the model made to one of the caller's `tools`, as OpenAI "
        "sends it; the caller runs it and sends the result back in a `tool` message.",
        "properties": {
            "id": {
                "type": "string",
                "minLength": 1,
                "description": "The call's id, which the `tool` message with its result "
                "names as `tool_call_id`.",
            },
            "type": {"type": "string", "enum": ["function"]},
            "function": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": TOOL_NAME},
                    "arguments": {
                        "type": "string",
                        "description": "The arguments: a JSON object, as a string.",
                    },
                },
                "required": ["name", "arguments"],
            },
        },
        "required": ["id", "type", "function"],
        "example": {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
    },
    "ChatMessage": {
        "type": "object",
        "description": "A message of the conversation. `system` and `developer` messages "
        "are added to the agent's own instructions; the others are the turns the model "
        "sees, from the first `user` message on (earlier assistant messages and a trailing "
        "assistant message without tool calls are not used). Each tool call of an "
        "`assistant` message must be answered by a `tool` message before the next other "
        "message. Other fields (`name`, `refusal`, ...) are ignored.",
        "properties": {
            "role": {
                "type": "string",
                "enum": sorted(ROLES - {"function"}),
                "description": "The legacy `function` role is a 400: send `tool` messages.",
            },
            "content": {
                "nullable": True,
                "description": "A string, a list of content parts (texts joined by "
                "newlines; image parts in `user` messages only), or null (no text, e.g. an "
                "assistant message with only `tool_calls`). No NUL characters.",
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": _ref("ChatContentPart")},
                ],
            },
            "tool_calls": {
                "type": "array",
                "nullable": True,
                "items": _ref("ChatToolCall"),
                "description": "`assistant` messages: the calls the model made (as an "
                "earlier answer gave them); `function.arguments` must be a JSON object as a "
                "string (or empty).",
            },
            "tool_call_id": {
                "type": "string",
                "description": "`tool` messages (required there): the `id` of the call, made "
                "by an earlier assistant message, whose result `content` is.",
            },
        },
        "required": ["role"],
        "additionalProperties": True,
    },
    "ChatTool": {
        "type": "object",
        "description": "A function tool the caller runs itself, offered to the model beside "
        "the agent's own tools (its name may not be one of theirs; a remote agent takes "
        "none). A call to it ends the answer with `finish_reason` `tool_calls`.",
        "properties": {
            "type": {"type": "string", "enum": ["function"]},
            "function": {
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "pattern": TOOL_NAME,
                        "description": "Unique among `tools`.",
                    },
                    "description": _nullable({"type": "string"}),
                    "parameters": _nullable(
                        {
                            **_SCHEMA_OBJECT,
                            "description": "The arguments' JSON Schema (an object schema); "
                            'omitted: `{"type": "object", "properties": {}}`.',
                        }
                    ),
                    "strict": _nullable({"type": "boolean", "description": "Ignored."}),
                },
                "required": ["name"],
            },
        },
        "required": ["type", "function"],
        "example": {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        },
    },
    "ChatToolChoice": {
        "nullable": True,
        "description": "`auto` (the default, also for null), `none`, `required` (some tool "
        'must be called), or `{"type": "function", "function": {"name": ...}}` naming one of '
        "`tools`. `none` holds for every model call of the run; `required` and a named "
        "function for its first (later calls are `auto`).",
        "oneOf": [
            {"type": "string", "enum": ["auto", "none", "required"]},
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["function"]},
                    "function": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                },
                "required": ["type", "function"],
            },
        ],
    },
    "ChatResponseFormat": {
        "type": "object",
        "description": "`text` (the agent's own output format), `json_object` (any JSON "
        "object) or `json_schema` (an object matching `json_schema.schema`): the run's "
        "structured output, whose JSON is the answer's `content`. Not for crews (400).",
        "properties": {
            "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
            "json_schema": {
                "type": "object",
                "description": "With `json_schema` (required there); `name`, `description` "
                "and `strict` are not used.",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "schema": _SCHEMA_OBJECT,
                    "strict": _nullable({"type": "boolean"}),
                },
                "required": ["schema"],
            },
        },
        "required": ["type"],
        "example": {
            "type": "json_schema",
            "json_schema": {
                "name": "city",
                "schema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "population": {"type": "integer"},
                    },
                    "required": ["name", "population"],
                },
            },
        },
    },
    "ChatCompletionRequest": {
        "type": "object",
        "description": (
            "Starts ONE run of the agent or crew named by `model`. The messages reach an "
            "agent as a conversation (its instructions, model and own tools apply; system "
            "and developer messages are added to its instructions); the run's recorded input "
            "is the last `user` message's text. A crew takes text turns only (no `tools`, "
            "tool calls or results, `response_format` or images: 400) and gets the "
            "conversation as one text, earlier turns as a transcript in front of the last "
            f"user message (oldest dropped first to fit {MAX_INPUT_CHARS} characters); "
            "sampling options do not reach its members. Fields not listed here "
            "(`frequency_penalty`, `presence_penalty`, `logprobs`, `parallel_tool_calls`, "
            "`metadata`, ...) are ignored."
        ),
        "properties": {
            "model": {
                "type": "string",
                "minLength": 1,
                "description": "The slug of an active agent, or else of an active crew "
                "(see `GET /v1/models`).",
            },
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_MESSAGES,
                "items": _ref("ChatMessage"),
                "description": "The conversation: at least one `user` message, the last of "
                f"which is not blank and at most {MAX_INPUT_CHARS} characters; all the "
                f"messages' text together at most {MAX_CONVERSATION_CHARS} characters.",
            },
            "stream": {
                "type": "boolean",
                "nullable": True,
                "default": False,
                "description": "Answer as server-sent events (`text/event-stream`) instead "
                "of one JSON object; null means false.",
            },
            "stream_options": {
                "type": "object",
                "nullable": True,
                "properties": {
                    "include_usage": {
                        "type": "boolean",
                        "nullable": True,
                        "default": False,
                        "description": "With `stream`: end the stream (before `[DONE]`) "
                        "with a chunk whose `choices` is empty and which carries `usage`.",
                    }
                },
                "additionalProperties": True,
                "description": "Options of a streamed answer; other keys are ignored.",
            },
            "tools": {
                "type": "array",
                "nullable": True,
                "maxItems": MAX_TOOLS,
                "items": _ref("ChatTool"),
                "description": f"At most {MAX_TOOLS} function tools the caller runs itself.",
            },
            "tool_choice": _ref("ChatToolChoice"),
            "response_format": {
                "allOf": [_ref("ChatResponseFormat")],
                "nullable": True,
                "description": "The run's output format; null: the agent's own.",
            },
            "temperature": {
                "type": "number",
                "nullable": True,
                "minimum": 0,
                "maximum": 2,
                "description": "Replaces the agent's temperature for this run (not on "
                "Anthropic connections, which take no sampling options).",
            },
            "top_p": {
                "type": "number",
                "nullable": True,
                "minimum": 0,
                "maximum": 1,
                "description": "Nucleus sampling for this run (not on Anthropic connections).",
            },
            "max_completion_tokens": {
                "type": "integer",
                "nullable": True,
                "minimum": 1,
                "description": f"Tokens per model response, {MAX_TOKENS_CAP}. With "
                "`max_tokens` too, the smaller applies.",
            },
            "max_tokens": {
                "type": "integer",
                "nullable": True,
                "minimum": 1,
                "description": "The older name of `max_completion_tokens`.",
            },
            "stop": {
                "nullable": True,
                "description": f"A stop sequence, or a list of at most {MAX_STOP} non-empty ones.",
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "maxItems": MAX_STOP,
                        "items": {"type": "string", "minLength": 1},
                    },
                ],
            },
            "seed": {
                "type": "integer",
                "nullable": True,
                "minimum": -(2**63) + 1,
                "maximum": 2**63 - 1,
                "description": "Passed to the model provider (not on Anthropic connections).",
            },
            "n": {
                "type": "integer",
                "nullable": True,
                "enum": [1],
                "description": "Only one choice per request: any other value is a 400.",
            },
            "user": {
                "type": "string",
                "nullable": True,
                "maxLength": 256,
                "description": "The caller's id for its own end user; recorded with the run.",
            },
        },
        "required": ["model", "messages"],
        "additionalProperties": True,
    },
    # -- chat completions: the answer
    "ChatCompletionUsage": {
        "type": "object",
        "description": "The run's tokens, over all its model calls (and a crew's members').",
        "properties": {
            "prompt_tokens": {"type": "integer"},
            "completion_tokens": {"type": "integer"},
            "total_tokens": {"type": "integer"},
        },
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    },
    "ChatCompletionMessage": {
        "type": "object",
        "properties": {
            "role": {"type": "string", "enum": ["assistant"]},
            "content": _nullable(
                {
                    "type": "string",
                    "description": "The run's output (with `response_format`, the JSON of "
                    "its structured output); for a run parked for a human's approval, "
                    "followed by a note naming the run and the URLs where each call is "
                    "approved or rejected. Null when the answer is only `tool_calls`.",
                }
            ),
            "refusal": _nullable({"type": "string", "description": "Always null."}),
            "tool_calls": {
                "type": "array",
                "minItems": 1,
                "items": _ref("ChatToolCall"),
                "description": "Only with `finish_reason` `tool_calls`: the calls of the "
                "caller's tools for it to run. Send them back as the assistant message, "
                "then a `tool` message per call with its result, in the next request (a new "
                "run).",
            },
        },
        "required": ["role", "content", "refusal"],
    },
    "ChatCompletionChoice": {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "enum": [0]},
            "message": _ref("ChatCompletionMessage"),
            "logprobs": _nullable({"type": "object", "description": "Always null."}),
            "finish_reason": {
                "type": "string",
                "enum": ["stop", "length", "tool_calls"],
                "description": "`tool_calls` when the model called the caller's tools "
                "(`message.tool_calls`), `length` when the run hit its round limit, else "
                "`stop` (also for a run awaiting approval).",
            },
        },
        "required": ["index", "message", "logprobs", "finish_reason"],
    },
    "ChatCompletion": {
        "type": "object",
        "description": "The answer of a finished (or approval-parked) run.",
        "properties": {
            "id": {
                "type": "string",
                "pattern": "^chatcmpl-[0-9]+$",
                "description": "`chatcmpl-<run id>`: the run is at `/api/v1/runs/<run id>`.",
            },
            "object": {"type": "string", "enum": ["chat.completion"]},
            "created": {"type": "integer", "description": "When the run was created."},
            "model": {"type": "string", "description": "The requested `model`."},
            "choices": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": _ref("ChatCompletionChoice"),
            },
            "usage": _ref("ChatCompletionUsage"),
            "system_fingerprint": _nullable({"type": "string", "description": "Always null."}),
        },
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "example": {
            "id": "chatcmpl-42",
            "object": "chat.completion",
            "created": 1751328000,
            "model": "assistant",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "It is 42.", "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
            "system_fingerprint": None,
        },
    },
    "ChatCompletionChunkToolCall": {
        "type": "object",
        "description": "A call of one of the caller's tools, streamed whole in one chunk "
        "(the name and all the arguments at once).",
        "properties": {
            "index": {"type": "integer", "minimum": 0, "description": "The call's position."},
            "id": {"type": "string"},
            "type": {"type": "string", "enum": ["function"]},
            "function": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "arguments": {"type": "string", "description": "A JSON object, as text."},
                },
                "required": ["name", "arguments"],
            },
        },
        "required": ["index", "id", "type", "function"],
    },
    "ChatCompletionChunkDelta": {
        "type": "object",
        "description": 'The first chunk\'s is `{"role": "assistant", "content": ""}`, '
        'text chunks\' `{"content": "..."}`, a tool call\'s `{"tool_calls": [...]}`, the '
        "finish chunk's `{}`.",
        "properties": {
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "string"},
            "tool_calls": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": _ref("ChatCompletionChunkToolCall"),
            },
        },
    },
    "ChatCompletionChunkChoice": {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "enum": [0]},
            "delta": _ref("ChatCompletionChunkDelta"),
            "logprobs": _nullable({"type": "object", "description": "Always null."}),
            "finish_reason": _nullable(
                {
                    "type": "string",
                    "enum": ["stop", "length", "tool_calls"],
                    "description": "Null but on the finish chunk (see `ChatCompletionChoice`).",
                }
            ),
        },
        "required": ["index", "delta", "logprobs", "finish_reason"],
    },
    "ChatCompletionChunk": {
        "type": "object",
        "description": "One `data:` line of a streamed answer (see `POST /v1/chat/completions`).",
        "properties": {
            "id": {"type": "string", "pattern": "^chatcmpl-[0-9]+$"},
            "object": {"type": "string", "enum": ["chat.completion.chunk"]},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "system_fingerprint": _nullable({"type": "string"}),
            "choices": {
                "type": "array",
                "minItems": 0,
                "maxItems": 1,
                "items": _ref("ChatCompletionChunkChoice"),
                "description": "One choice; empty in the usage chunk.",
            },
            "usage": {
                "allOf": [_ref("ChatCompletionUsage")],
                "description": "Only in the last chunk, with `stream_options.include_usage`.",
            },
        },
        "required": ["id", "object", "created", "model", "choices"],
    },
    "ChatCompletionStreamEvent": {
        "type": "object",
        "description": "One server-sent event of a streamed chat completion (OpenAPI 3.0 "
        "describes an event stream by the schema of each event). Its `data` is a "
        "`ChatCompletionChunk` as JSON, an `OpenAIError` as JSON (a failed or cancelled run), "
        "or `[DONE]` (the last event). No `event`, `id` or `retry` fields are sent.",
        "properties": {
            "data": {"type": "string", "pattern": "^(\\{.*\\}|\\[DONE\\])$"},
        },
        "required": ["data"],
    },
    # -- responses: the request
    "ResponsesInputImage": {
        "type": "object",
        "description": "An image in a `user` message: `image_url` is a data URL or an "
        "http(s) URL, taken as `ChatImagePart`'s (same formats, sizes and limits; `file_id` "
        "is not supported).",
        "properties": {
            "type": {"type": "string", "enum": ["input_image"]},
            "image_url": {"type": "string", "minLength": 1},
            "detail": {"type": "string", "description": "Ignored."},
        },
        "required": ["type", "image_url"],
    },
    "ResponsesInputMessage": {
        "type": "object",
        "description": "A message: `system` and `developer` ones are added to the agent's "
        "instructions, the others are the conversation's turns (as `ChatMessage`).",
        "properties": {
            "type": {"type": "string", "enum": ["message"], "default": "message"},
            "role": {"type": "string", "enum": ["assistant", "developer", "system", "user"]},
            "content": {
                "nullable": True,
                "description": "A string, or a list of text parts (`input_text`, "
                "`output_text`) and, in `user` messages, `input_image` parts; null: no text.",
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "items": {"oneOf": [_ref("ChatTextPart"), _ref("ResponsesInputImage")]},
                    },
                ],
            },
        },
        "required": ["role"],
        "additionalProperties": True,
    },
    "ResponsesInputFunctionCall": {
        "type": "object",
        "description": "A call the model made to one of the caller's tools (as an earlier "
        "response's `function_call` output item); consecutive calls form one assistant turn.",
        "properties": {
            "type": {"type": "string", "enum": ["function_call"]},
            "call_id": {"type": "string", "minLength": 1},
            "name": {"type": "string", "pattern": TOOL_NAME},
            "arguments": {"type": "string", "description": "A JSON object, as text."},
        },
        "required": ["type", "call_id", "name"],
        "additionalProperties": True,
    },
    "ResponsesInputFunctionCallOutput": {
        "type": "object",
        "description": "The result of a call, which an earlier item of `input` (or the "
        "previous response) made; every call needs its result before the next message.",
        "properties": {
            "type": {"type": "string", "enum": ["function_call_output"]},
            "call_id": {"type": "string", "minLength": 1},
            "output": {
                "description": "The result: a string, or any JSON (sent to the model as JSON text)."
            },
        },
        "required": ["type", "call_id"],
        "additionalProperties": True,
    },
    "ResponsesInputItem": {
        "description": "An item of `input`. `reasoning` items are skipped; any other type "
        "(`web_search_call`, `item_reference`, ...) is a 400.",
        "oneOf": [
            _ref("ResponsesInputMessage"),
            _ref("ResponsesInputFunctionCall"),
            _ref("ResponsesInputFunctionCallOutput"),
            {
                "type": "object",
                "properties": {"type": {"type": "string", "enum": ["reasoning"]}},
                "required": ["type"],
                "additionalProperties": True,
            },
        ],
    },
    "ResponsesTool": {
        "type": "object",
        "description": "A function tool the caller runs itself (as `ChatTool`, flat). Only "
        "function tools: built-in ones (`web_search`, `file_search`, ...) are a 400, the "
        "agent's own tools run on the platform.",
        "properties": {
            "type": {"type": "string", "enum": ["function"]},
            "name": {"type": "string", "pattern": TOOL_NAME},
            "description": _nullable({"type": "string"}),
            "parameters": _nullable(_SCHEMA_OBJECT),
            "strict": _nullable({"type": "boolean", "description": "Ignored."}),
        },
        "required": ["type", "name"],
    },
    "ResponsesRequest": {
        "type": "object",
        "description": "Starts ONE run of the agent (or crew) named by `model`; the body is "
        "taken as the matching Chat Completions request (see `ChatCompletionRequest`), so "
        "it is accepted and refused alike. `previous_response_id` puts the earlier "
        "response's conversation (its run's turns, as the model saw them; not its "
        "instructions) in front of `input`. Fields not listed here (`metadata`, "
        "`parallel_tool_calls`, `reasoning`, `truncation`, `include`, ...) are ignored.",
        "properties": {
            "model": {
                "type": "string",
                "minLength": 1,
                "description": "The slug of an active agent, or else of an active crew "
                "(whose response can be neither read back nor continued); or a gateway "
                "model, `<connection>/<model>`.",
            },
            "input": {
                "description": "The new turn: a string (one user message) or a non-empty "
                "list of items. Its last message is a `user` one (or it ends with function "
                "call outputs).",
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "minItems": 1, "items": _ref("ResponsesInputItem")},
                ],
            },
            "instructions": {
                "type": "string",
                "nullable": True,
                "description": "Added to the agent's own instructions, for this response only.",
            },
            "tools": {
                "type": "array",
                "nullable": True,
                "maxItems": MAX_TOOLS,
                "items": _ref("ResponsesTool"),
            },
            "tool_choice": {
                "nullable": True,
                "description": "`auto`, `none`, `required`, or "
                '`{"type": "function", "name": ...}` naming one of `tools`.',
                "oneOf": [
                    {"type": "string", "enum": ["auto", "none", "required"]},
                    {
                        "type": "object",
                        "properties": {
                            "type": {"type": "string", "enum": ["function"]},
                            "name": {"type": "string"},
                        },
                        "required": ["type", "name"],
                    },
                ],
            },
            "text": {
                "type": "object",
                "nullable": True,
                "description": "The output format: `text`, `json_object`, or `json_schema` "
                "with its `schema` (an object schema) beside `type`: the run's structured "
                "output, whose JSON is the message's text. Not for crews (400).",
                "properties": {
                    "format": {
                        "type": "object",
                        "properties": {
                            "type": {
                                "type": "string",
                                "enum": ["text", "json_object", "json_schema"],
                            },
                            "name": {"type": "string", "description": "Not used."},
                            "schema": _SCHEMA_OBJECT,
                            "strict": _nullable({"type": "boolean", "description": "Ignored."}),
                        },
                        "required": ["type"],
                    }
                },
                "required": ["format"],
            },
            "temperature": {"type": "number", "nullable": True, "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "nullable": True, "minimum": 0, "maximum": 1},
            "max_output_tokens": {
                "type": "integer",
                "nullable": True,
                "minimum": 1,
                "description": f"Tokens per model response, {MAX_TOKENS_CAP}.",
            },
            "user": {"type": "string", "nullable": True, "maxLength": 256},
            "stream": {
                "type": "boolean",
                "nullable": True,
                "default": False,
                "description": "Answer as typed server-sent events (`ResponseStreamEvent`).",
            },
            "store": {
                "type": "boolean",
                "default": True,
                "description": "`false`: the response can be neither read back "
                "(`GET /v1/responses/{response_id}`) nor continued (`previous_response_id`); "
                "the run itself is recorded as any run.",
            },
            "previous_response_id": {
                "type": "string",
                "nullable": True,
                "pattern": "^resp_[0-9]+$",
                "description": "A finished, stored response of an agent that the key may "
                "read (its own runs, or every run for an admin's key): this response "
                "continues its conversation.",
            },
        },
        "required": ["model", "input"],
        "additionalProperties": True,
    },
    # -- responses: the answer
    "ResponseUsage": {
        "type": "object",
        "description": "The run's tokens, over all its model calls.",
        "properties": {
            "input_tokens": {"type": "integer"},
            "input_tokens_details": {
                "type": "object",
                "properties": {"cached_tokens": {"type": "integer", "enum": [0]}},
                "required": ["cached_tokens"],
            },
            "output_tokens": {"type": "integer"},
            "output_tokens_details": {
                "type": "object",
                "properties": {"reasoning_tokens": {"type": "integer", "enum": [0]}},
                "required": ["reasoning_tokens"],
            },
            "total_tokens": {"type": "integer"},
        },
        "required": [
            "input_tokens",
            "input_tokens_details",
            "output_tokens",
            "output_tokens_details",
            "total_tokens",
        ],
    },
    "ResponseOutputText": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["output_text"]},
            "text": {"type": "string"},
            "annotations": {"type": "array", "maxItems": 0, "items": {}},
        },
        "required": ["type", "text", "annotations"],
    },
    "ResponseOutputMessage": {
        "type": "object",
        "description": "The run's text: its output (with `text.format`, the JSON of its "
        "structured output), and for a run parked for a human's approval a note naming the "
        "run and the URLs where each call is approved or rejected.",
        "properties": {
            "type": {"type": "string", "enum": ["message"]},
            "id": {"type": "string", "pattern": "^msg_[0-9]+$", "description": "`msg_<run id>`."},
            "status": {
                "type": "string",
                "enum": ["completed", "in_progress"],
                "description": "`in_progress` (with no content yet) only in the stream's "
                "`response.output_item.added`.",
            },
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "array", "maxItems": 1, "items": _ref("ResponseOutputText")},
        },
        "required": ["type", "id", "status", "role", "content"],
    },
    "ResponseFunctionCall": {
        "type": "object",
        "description": "A call of one of the caller's tools: the response ends with it, and "
        "the caller sends its result as a `function_call_output` item of the next request "
        "(with `previous_response_id`, or with the call itself in `input`).",
        "properties": {
            "type": {"type": "string", "enum": ["function_call"]},
            "id": {"type": "string", "pattern": "^fc_", "description": "`fc_<call_id>`."},
            "call_id": {"type": "string"},
            "name": {"type": "string"},
            "arguments": {
                "type": "string",
                "description": "A JSON object, as text (empty in the stream's "
                "`response.output_item.added`).",
            },
            "status": {"type": "string", "enum": ["completed", "in_progress"]},
        },
        "required": ["type", "id", "call_id", "name", "arguments", "status"],
    },
    "ResponseOutputItem": {
        "description": "An item of a response's `output`: at most one `message`, then the "
        "`function_call`s.",
        "oneOf": [_ref("ResponseOutputMessage"), _ref("ResponseFunctionCall")],
        "discriminator": {
            "propertyName": "type",
            "mapping": {
                "message": "#/components/schemas/ResponseOutputMessage",
                "function_call": "#/components/schemas/ResponseFunctionCall",
            },
        },
    },
    "Response": {
        "type": "object",
        "description": "A response: one run of an agent (or crew), as OpenAI's Responses API "
        "shapes it.",
        "properties": {
            "id": {
                "type": "string",
                "pattern": "^resp_[0-9]+$",
                "description": "`resp_<run id>`: the run is at `/api/v1/runs/<run id>`.",
            },
            "object": {"type": "string", "enum": ["response"]},
            "created_at": {"type": "integer", "description": "When the run was created."},
            "status": {
                "type": "string",
                "enum": ["completed", "incomplete", "in_progress", "failed"],
                "description": "`completed` (also for a run awaiting approval, or one that "
                "ended with calls of the caller's tools); `incomplete` when the run hit its "
                "round limit; `in_progress` while it goes on (the stream's first events, or "
                "read back early: no output yet); `failed` for a failed or cancelled run "
                "(streamed or read back; `error` says why).",
            },
            "model": {
                "type": "string",
                "description": "The requested `model` (read back: the agent's slug).",
            },
            "output": {"type": "array", "items": _ref("ResponseOutputItem")},
            "usage": {
                "allOf": [_ref("ResponseUsage")],
                "nullable": True,
                "description": "Null while the run goes on.",
            },
            "error": _nullable(
                {
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "enum": ["server_error"]},
                        "message": {"type": "string"},
                    },
                    "required": ["code", "message"],
                    "description": "Only with `status` `failed`.",
                }
            ),
            "incomplete_details": _nullable(
                {
                    "type": "object",
                    "properties": {"reason": {"type": "string", "enum": ["max_output_tokens"]}},
                    "required": ["reason"],
                    "description": "Only with `status` `incomplete`.",
                }
            ),
            "instructions": _nullable({"type": "string", "description": "Always null."}),
            "tools": {
                "type": "array",
                "maxItems": 0,
                "items": {},
                "description": "Always empty.",
            },
            "tool_choice": {"type": "string", "enum": ["auto"], "description": "Always `auto`."},
            "parallel_tool_calls": {"type": "boolean"},
            "previous_response_id": _nullable(
                {"type": "string", "description": "Always null (not echoed)."}
            ),
            "metadata": {"type": "object", "description": "Always empty."},
            "text": {
                "type": "object",
                "description": 'Always `{"format": {"type": "text"}}` (not echoed).',
            },
        },
        "required": [
            "id",
            "object",
            "created_at",
            "status",
            "model",
            "output",
            "usage",
            "error",
            "incomplete_details",
            "instructions",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "previous_response_id",
            "metadata",
            "text",
        ],
        "example": {
            "id": "resp_42",
            "object": "response",
            "created_at": 1751328000,
            "status": "completed",
            "model": "assistant",
            "output": [
                {
                    "type": "message",
                    "id": "msg_42",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": "fc_call_1",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                    "status": "completed",
                },
            ],
            "usage": {
                "input_tokens": 30,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 9,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 39,
            },
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "tools": [],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "metadata": {},
            "text": {"format": {"type": "text"}},
        },
    },
    "ResponseEvent": {
        "type": "object",
        "description": "The JSON of one typed event of a streamed response (its `data`); "
        "which other fields it has depends on `type` (see `POST /v1/responses`).",
        "properties": {
            "type": {"type": "string", "enum": list(RESPONSE_EVENTS)},
            "sequence_number": {
                "type": "integer",
                "minimum": 1,
                "description": "1, 2, 3, ... in the order sent.",
            },
            "response": {
                "allOf": [_ref("Response")],
                "description": "`response.created`, `response.in_progress` (`in_progress`, "
                "no output), `response.completed` (the whole response), `response.failed`.",
            },
            "output_index": {"type": "integer", "minimum": 0},
            "item": {
                "allOf": [_ref("ResponseOutputItem")],
                "description": "`response.output_item.added` (in progress) and "
                "`response.output_item.done` (complete).",
            },
            "item_id": {"type": "string", "description": "The output item's `id`."},
            "content_index": {"type": "integer", "enum": [0]},
            "part": _ref("ResponseOutputText"),
            "delta": {
                "type": "string",
                "description": "`response.output_text.delta`: more text; "
                "`response.function_call_arguments.delta`: the call's arguments (all of them).",
            },
            "text": {"type": "string", "description": "`response.output_text.done`: all text."},
            "arguments": {
                "type": "string",
                "description": "`response.function_call_arguments.done`: the arguments.",
            },
            "logprobs": {"type": "array", "maxItems": 0, "items": {}},
        },
        "required": ["type", "sequence_number"],
    },
    "ResponseStreamEvent": {
        "type": "object",
        "description": "One server-sent event of a streamed response: `event` is the "
        "event's type and `data` a `ResponseEvent` as JSON. No `id`, `retry` or `[DONE]`: "
        "the stream ends after `response.completed` or `response.failed`.",
        "properties": {
            "event": {"type": "string", "enum": list(RESPONSE_EVENTS)},
            "data": {"type": "string", "pattern": "^\\{.*\\}$"},
        },
        "required": ["event", "data"],
    },
}

# -- responses ---------------------------------------------------------------------------
_ERROR_EXAMPLES = {
    400: ("The last user message is empty.", "invalid_request_error", "messages", None),
    401: (
        "You didn't provide an API key. Send your tenant API key as `Authorization: Bearer <key>`.",
        "invalid_request_error",
        None,
        "missing_api_key",
    ),
    403: (
        "This API key lacks the 'run' scope.",
        "invalid_request_error",
        None,
        "insufficient_scope",
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


def _header(description: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "string"}}


def _error(
    status: int,
    description: str,
    headers: dict[str, Any] | None = None,
    example: tuple[str, str, str | None, str | None] | None = None,
) -> dict:
    message, type_, param, code = example or _ERROR_EXAMPLES[status]
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref("OpenAIError"), "example": body}},
    }
    if headers:
        response["headers"] = headers
    return response


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


def _forbidden(scope: str) -> dict[str, Any]:
    example = (f"This API key lacks the '{scope}' scope.", "invalid_request_error", None)
    return _error(
        403,
        f"The API key lacks the `{scope}` scope (`insufficient_scope`).",
        example=(*example, "insufficient_scope"),
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


STREAM_EXAMPLE = (
    _chunk([_chunk_choice({"role": "assistant", "content": ""})])
    + _chunk([_chunk_choice({"content": "It is 42."})])
    + _chunk([_chunk_choice({}, "stop")])
    + _chunk([], usage=COMPONENTS["ChatCompletion"]["example"]["usage"])
    + "data: [DONE]\n\n"
)

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


def _response_example(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    example = COMPONENTS["Response"]["example"]
    return {
        **example,
        "status": status,
        "output": output,
        "usage": example["usage"] if status == "completed" else None,
    }


_MESSAGE = COMPONENTS["Response"]["example"]["output"][0]
_TEXT = {"item_id": "msg_42", "output_index": 0, "content_index": 0}
RESPONSES_STREAM_EXAMPLE = "".join(
    _sse({"type": event, "sequence_number": number, **fields}, event)
    for number, (event, fields) in enumerate(
        [
            ("response.created", {"response": _response_example("in_progress", [])}),
            ("response.in_progress", {"response": _response_example("in_progress", [])}),
            (
                "response.output_item.added",
                {"output_index": 0, "item": {**_MESSAGE, "status": "in_progress", "content": []}},
            ),
            (
                "response.content_part.added",
                {**_TEXT, "part": {"type": "output_text", "text": "", "annotations": []}},
            ),
            ("response.output_text.delta", {**_TEXT, "delta": "Let me look.", "logprobs": []}),
            ("response.output_text.done", {**_TEXT, "text": "Let me look.", "logprobs": []}),
            ("response.content_part.done", {**_TEXT, "part": _MESSAGE["content"][0]}),
            ("response.output_item.done", {"output_index": 0, "item": _MESSAGE}),
            ("response.completed", {"response": _response_example("completed", [_MESSAGE])}),
        ],
        start=1,
    )
)

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

_RESPONSE_ID = {
    "name": "response_id",
    "in": "path",
    "required": True,
    "description": "`resp_<run id>`, as the response's `id`.",
    "schema": {"type": "string"},
    "example": "resp_42",
}

_CHAT_EXAMPLES = {
    "simple": {
        "summary": "One question",
        "value": {"model": "assistant", "messages": [{"role": "user", "content": "What is 6*7?"}]},
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
            "tools": [COMPONENTS["ChatTool"]["example"]],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [COMPONENTS["ChatToolCall"]["example"]],
                },
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
            "response_format": COMPONENTS["ChatResponseFormat"]["example"],
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

_RESPONSES_EXAMPLES = {
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
                    "parameters": COMPONENTS["ChatTool"]["example"]["function"]["parameters"],
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
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "city",
                    "schema": COMPONENTS["ChatResponseFormat"]["example"]["json_schema"]["schema"],
                }
            },
        },
    },
}


def _operations() -> dict[str, dict[str, Any]]:
    security = [{SECURITY_SCHEME: []}]
    return {
        "/v1/models": {
            "get": {
                "operationId": "openai_models_list",
                "tags": [TAG],
                "summary": "List models (the tenant's agents and crews)",
                "description": "The key's tenant's active agents and crews as OpenAI models "
                "(`id` = slug). Needs the `read` scope.",
                "security": security,
                "responses": {
                    "200": {
                        "description": "The models.",
                        "content": {"application/json": {"schema": _ref("OpenAIModelList")}},
                    },
                    "401": UNAUTHORIZED,
                    "403": _forbidden("read"),
                    "429": TOO_MANY,
                },
            }
        },
        "/v1/models/{model_id}": {
            "get": {
                "operationId": "openai_models_retrieve",
                "tags": [TAG],
                "summary": "Retrieve a model (an agent or crew)",
                "description": "An active agent of the key's tenant with this slug, else an "
                "active crew. Needs the `read` scope.",
                "security": security,
                "parameters": [
                    {
                        "name": "model_id",
                        "in": "path",
                        "required": True,
                        "description": "The agent's or crew's slug.",
                        "schema": {"type": "string"},
                        "example": "assistant",
                    }
                ],
                "responses": {
                    "200": {
                        "description": "The model.",
                        "content": {"application/json": {"schema": _ref("OpenAIModel")}},
                    },
                    "401": UNAUTHORIZED,
                    "403": _forbidden("read"),
                    "404": _error(
                        404, "No active agent or crew with this slug (`model_not_found`)."
                    ),
                    "429": TOO_MANY,
                },
            }
        },
        "/v1/chat/completions": {
            "post": {
                "operationId": "openai_chat_completions_create",
                "tags": [TAG],
                "summary": "Create a chat completion (run an agent or crew)",
                "description": CHAT_DESCRIPTION,
                "security": security,
                "parameters": [
                    {
                        "name": "stream",
                        "in": "query",
                        "required": False,
                        "description": '`true` streams as if the body said `"stream": true`; '
                        "any other value leaves it to the body.",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _ref("ChatCompletionRequest"),
                            "examples": _CHAT_EXAMPLES,
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The run's answer: a `chat.completion` object, or with "
                        "`stream` a `text/event-stream` of `chat.completion.chunk`s.\n\n"
                        + STREAM_DESCRIPTION,
                        "headers": {"X-Run-Id": {**RUN_ID, "required": True}},
                        "content": {
                            "application/json": {"schema": _ref("ChatCompletion")},
                            "text/event-stream": {
                                "schema": _ref("ChatCompletionStreamEvent"),
                                "example": STREAM_EXAMPLE,
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
            }
        },
        "/v1/responses": {
            "post": {
                "operationId": "openai_responses_create",
                "tags": [TAG],
                "summary": "Create a response (run an agent)",
                "description": RESPONSES_DESCRIPTION,
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _ref("ResponsesRequest"),
                            "examples": _RESPONSES_EXAMPLES,
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The run's answer: a `response` object, or with "
                        "`stream` a `text/event-stream` of typed events.\n\n"
                        + RESPONSES_STREAM_DESCRIPTION,
                        "headers": {"X-Run-Id": RUN_ID},  # (not for a gateway model)
                        "content": {
                            "application/json": {"schema": _ref("Response")},
                            "text/event-stream": {
                                "schema": _ref("ResponseStreamEvent"),
                                "example": RESPONSES_STREAM_EXAMPLE,
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
            }
        },
        "/v1/responses/{response_id}": {
            "get": {
                "operationId": "openai_responses_retrieve",
                "tags": [TAG],
                "summary": "Retrieve a response",
                "description": "A response as its run stands now: `in_progress` (no output "
                "yet) while the run goes on, else as it ended (`completed`, `incomplete`, "
                "or `failed` with its `error`). Needs the `read` scope; only responses of "
                "agents (a gateway model's are not stored), stored (not `store: false`), "
                "and of runs the key may read (its own, or every run for an admin's key).",
                "security": security,
                "parameters": [_RESPONSE_ID],
                "responses": {
                    "200": {
                        "description": "The response.",
                        "content": {"application/json": {"schema": _ref("Response")}},
                    },
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
            }
        },
    }


def add_openai_compat(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: document the `/v1` OpenAI-compatible endpoint."""
    result.setdefault("paths", {}).update(_operations())
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(copy.deepcopy(COMPONENTS))
    tags = result.setdefault("tags", [])
    if not any(tag.get("name") == TAG for tag in tags):
        tags.append(
            {
                "name": TAG,
                "description": "Any OpenAI client pointed at `https://<host>/v1` with a "
                "tenant API key: models are the tenant's agents and crews, a chat "
                "completion or a response runs one of them.",
            }
        )
    return result
