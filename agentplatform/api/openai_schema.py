"""The OpenAI-compatible endpoint (`/v1`, agentplatform.api.openai_compat) in the OpenAPI schema.

Those views are plain async Django views that drf-spectacular cannot see, so a postprocessing
hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) adds their three operations and the
component schemas below, written after what the views really accept and answer.
"""

from __future__ import annotations

import copy
from typing import Any

from agentplatform.api.openai_chat_request import ROLES
from agents.services import MAX_INPUT_CHARS

TAG = "OpenAI-compatible"
SECURITY_SCHEME = "ApiKey"  # agentplatform.api.schema.ApiKeyScheme: the tenant API key


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


# -- components --------------------------------------------------------------------------
ERROR_CODES = (
    "`invalid_api_key`, `missing_api_key` (401); `insufficient_scope`, `permission_denied` "
    "(403); `model_not_found`, `not_found`, `unknown_url` (404); `method_not_allowed` (405); "
    "`rate_limit_exceeded` (429); `run_failed`, `run_cancelled` (500); null otherwise "
    "(e.g. most 400s and 413)."
)

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
                    "`messages[2].content`, `stream`; else null.",
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
    "ChatContentPart": {
        "type": "object",
        "description": "A text content part; any other part type (images, audio, files) is a 400.",
        "properties": {
            "type": {"type": "string", "enum": ["text", "input_text"]},
            "text": {"type": "string"},
        },
        "required": ["type", "text"],
    },
    "ChatMessage": {
        "type": "object",
        "description": "A message of the conversation. Only `role` and the text of `content` "
        "are used; other fields (`name`, `tool_calls`, `tool_call_id`, ...) are ignored.",
        "properties": {
            "role": {"type": "string", "enum": sorted(ROLES)},
            "content": {
                "nullable": True,
                "description": "A string, a list of text parts (joined by newlines), or "
                "null (no text).",
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": _ref("ChatContentPart")},
                ],
            },
        },
        "required": ["role"],
        "additionalProperties": True,
    },
    "ChatCompletionRequest": {
        "type": "object",
        "description": (
            "Starts ONE run of the agent or crew named by `model`. Its input is the last "
            "`user` message; the messages before it (any role, empty ones skipped) are folded "
            "in front of it as a short transcript, oldest turns dropped first when the input "
            f"would exceed {MAX_INPUT_CHARS} characters; messages after the last user message "
            "are not used. The agent's own instructions, model and tools apply: every other "
            "field (`temperature`, `top_p`, `max_tokens`, `n`, `stop`, `tools`, "
            "`tool_choice`, `response_format`, `user`, `stream_options`, ...) is accepted and "
            "ignored."
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
                "items": _ref("ChatMessage"),
                "description": "At least one `user` message, whose last one is not blank; "
                f"the run input (with the folded transcript) is at most {MAX_INPUT_CHARS} "
                "characters and contains no NUL.",
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
                "additionalProperties": True,
                "description": "Ignored: a stream always ends with a chunk carrying "
                "`usage` (as if `include_usage` were true).",
            },
        },
        "required": ["model", "messages"],
        "additionalProperties": True,
    },
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
            "content": {
                "type": "string",
                "description": "The run's output; for a run parked for a human's approval, "
                "followed by a note naming the run and the URLs where each call is approved "
                "or rejected.",
            },
            "refusal": _nullable({"type": "string", "description": "Always null."}),
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
                "enum": ["stop", "length"],
                "description": "`length` when the run hit its round limit, else `stop` "
                "(also for a run awaiting approval).",
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
    "ChatCompletionChunkDelta": {
        "type": "object",
        "description": 'The first chunk\'s is `{"role": "assistant", "content": ""}`, '
        'text chunks\' `{"content": "..."}`, the last chunk\'s `{}`.',
        "properties": {
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "string"},
        },
    },
    "ChatCompletionChunkChoice": {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "enum": [0]},
            "delta": _ref("ChatCompletionChunkDelta"),
            "logprobs": _nullable({"type": "object", "description": "Always null."}),
            "finish_reason": _nullable({"type": "string", "enum": ["stop", "length"]}),
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
                "minItems": 1,
                "maxItems": 1,
                "items": _ref("ChatCompletionChunkChoice"),
            },
            "usage": _ref("ChatCompletionUsage"),
        },
        "required": ["id", "object", "created", "model", "choices"],
    },
    "ChatCompletionStreamEvent": {
        "type": "object",
        "description": "One server-sent event of a streamed answer (OpenAPI 3.0 describes "
        "an event stream by the schema of each event). Its `data` is a "
        "`ChatCompletionChunk` as JSON, an `OpenAIError` as JSON (a failed or cancelled run), "
        "or `[DONE]` (the last event). No `event`, `id` or `retry` fields are sent.",
        "properties": {
            "data": {"type": "string", "pattern": "^(\\{.*\\}|\\[DONE\\])$"},
        },
        "required": ["data"],
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


def _error(status: int, description: str, headers: dict[str, Any] | None = None) -> dict:
    message, type_, param, code = _ERROR_EXAMPLES[status]
    example = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref("OpenAIError"), "example": example}},
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


def _forbidden(scope: str) -> dict[str, Any]:
    return _error(403, f"The API key lacks the `{scope}` scope (`insufficient_scope`).")


STREAM_DESCRIPTION = """\
With `"stream": true` (or `?stream=true`): server-sent events, one `data: <json>` message \
per chunk, each a `chat.completion.chunk` object (component `ChatCompletionChunk`) with the \
same `id` (`chatcmpl-<run id>`):

1. `{"role": "assistant", "content": ""}` as the first chunk's `delta`;
2. the run's text as it is produced, `{"content": "..."}` (a crew's answer, which streams \
in its members' runs, and the approval note of a parked run come as one chunk at the end);
3. a last chunk with an empty `delta`, `finish_reason` (`stop` or `length`) and `usage`;
4. `data: [DONE]`.

Comment lines (`: keep-alive`) are sent while the run is quiet. When the run fails or is \
cancelled the stream sends an OpenAI error object instead of the last chunk \
(`data: {"error": {..., "type": "server_error", "code": "run_failed"}}`), then `[DONE]`.
"""

STREAM_EXAMPLE = (
    'data: {"id":"chatcmpl-42","object":"chat.completion.chunk","created":1751328000,'
    '"model":"assistant","system_fingerprint":null,"choices":[{"index":0,"delta":'
    '{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    'data: {"id":"chatcmpl-42","object":"chat.completion.chunk","created":1751328000,'
    '"model":"assistant","system_fingerprint":null,"choices":[{"index":0,"delta":'
    '{"content":"It is 42."},"logprobs":null,"finish_reason":null}]}\n\n'
    'data: {"id":"chatcmpl-42","object":"chat.completion.chunk","created":1751328000,'
    '"model":"assistant","system_fingerprint":null,"choices":[{"index":0,"delta":{},'
    '"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":30,'
    '"completion_tokens":9,"total_tokens":39}}\n\n'
    "data: [DONE]\n\n"
)

CHAT_DESCRIPTION = """\
Runs the agent (or crew) named by `model` once, executed server-side by a worker like any \
other run (`POST /api/v1/runs`), and answers with its output. Needs the `run` scope. The \
last `user` message is the run's input, earlier messages are folded in front of it as a \
transcript; the agent's own instructions, model and tools apply (platform tools execute \
server-side), so client-side `tools` and sampling parameters are ignored. A run that parks \
waiting for a human's approval ends its answer with a note naming the run and the URLs \
where each tool call is approved or rejected (`finish_reason` `stop`). A failed or \
cancelled run is a 500 (`run_failed` / `run_cancelled`, header `x-should-retry: false`): \
retrying would start another run. The response's `X-Run-Id` header names the run, which \
stays readable at `/api/v1/runs/{id}` (and `/events`), also when the client goes away.
"""


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
                            "examples": {
                                "simple": {
                                    "summary": "One question",
                                    "value": {
                                        "model": "assistant",
                                        "messages": [{"role": "user", "content": "What is 6*7?"}],
                                    },
                                },
                                "conversation": {
                                    "summary": "A conversation, streamed",
                                    "value": {
                                        "model": "assistant",
                                        "stream": True,
                                        "messages": [
                                            {"role": "system", "content": "Answer in French."},
                                            {"role": "user", "content": "My name is Ada."},
                                            {"role": "assistant", "content": "Enchantée, Ada."},
                                            {
                                                "role": "user",
                                                "content": [
                                                    {"type": "text", "text": "What is my name?"}
                                                ],
                                            },
                                        ],
                                    },
                                },
                            },
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
                    "400": _error(
                        400,
                        "The body is not a valid request: not a JSON object, no `model` (or "
                        "not valid Unicode), no or empty `messages`, an unknown role, "
                        "non-text content, no user message, an empty last user message, an "
                        "input over the limit or with NUL characters (`param` names the field).",
                    ),
                    "401": UNAUTHORIZED,
                    "403": _forbidden("run"),
                    "404": _error(
                        404, "No active agent or crew named `model` (`model_not_found`)."
                    ),
                    "413": _error(413, "The request body is too large."),
                    "429": TOO_MANY,
                    "500": _error(
                        500,
                        "The run failed (`run_failed`) or was cancelled (`run_cancelled`); "
                        "do not retry, the run is readable by its id.",
                        {
                            "X-Run-Id": RUN_ID,
                            "x-should-retry": _header("`false`: a retry starts another run."),
                        },
                    ),
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
                "completion runs one of them.",
            }
        )
    return result
