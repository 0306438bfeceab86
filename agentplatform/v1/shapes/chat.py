"""Chat Completions on the wire (`POST /v1/chat/completions`): the request, checked here item
by item (a message, a content part, a tool call, a tool, the tool choice, the output
format), and the answer. What spans items (a tool result answers an earlier call, a tool
name is unique, totals over the messages) is agentplatform.v1.chat_request's.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from typing_extensions import TypeAliasType

from agentplatform.v1.shapes.base import (
    Refusal,
    Refused,
    Shape,
    Text,
    by_json_type,
    kinds,
    storable,
    storable_json,
)
from agents.models import MAX_INPUT_CHARS
from agents.runtime.client_request import MAX_RESPONSE_TOKENS
from providers.runtime.images import MAX_IMAGE_BYTES, MAX_IMAGES
from tools.runtime.tool import NAME_PATTERN
from tools.runtime.validation import SchemaError, check_schema

MAX_MESSAGES = 2000
MAX_CONVERSATION_CHARS = 10 * MAX_INPUT_CHARS  # all messages' text together
MAX_TOOLS = 128  # as OpenAI
MAX_STOP = 4  # as OpenAI
MAX_USER_CHARS = 256
MAX_IMAGE_URL_CHARS = 2048  # an http(s) one; a data URL is bounded by its image's size
ROLES = ("assistant", "developer", "system", "tool", "user")  # and the legacy "function": a 400
TOOL_NAME = NAME_PATTERN.pattern
MAX_IMAGE_MB = MAX_IMAGE_BYTES // (1024 * 1024)
MAX_TOKENS_CAP = (
    f"at most the agent's `max_tokens_per_run` ({MAX_RESPONSE_TOKENS} if it has none); "
    "omitted, the agent's own per-response limit applies"
)
SCHEMA_OBJECT = (
    'A JSON Schema whose root is an object schema (`"type": "object"`, or no `type`); it '
    "must be a usable schema, at most 100,000 characters as JSON."
)
NOT_AN_OBJECT_SCHEMA = "The schema must be a JSON Schema object with `type` object."
ROLE = f"Each message needs a role: one of {', '.join(ROLES)}."
LEGACY_ROLE = "The legacy `function` role is not supported: send `tool` messages."
TOOL_RESULT = (
    "A `tool` message needs the `tool_call_id` of a call an earlier assistant message made."
)
A_TOOL_CALL = "A tool call needs an `id` and a `function`."
ARGUMENTS = "A tool call's `function.arguments` must be a JSON object as a string."
TOOL_NAME_RULE = "A tool's `name` must be 1-64 letters, digits, `_` or `-`."
EACH_TOOL = 'Each tool must be {"type": "function", "function": {...}}.'
TOOL_CHOICE = (
    '`tool_choice` must be "auto", "none", "required" or '
    '{"type": "function", "function": {"name": ...}}.'
)
RESPONSE_FORMAT = (
    '`response_format` must be {"type": "text"}, {"type": "json_object"} or '
    '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}.'
)
CONTENT = "`content` must be a string or a list of parts."
NOT_A_KIND = ("union_tag_invalid", "union_tag_not_found")


def usable_object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema whose root is an object and that the platform can use (tools.runtime.
    validation: local references only, RE2 patterns, bounded depth); its cost grows with its
    size, which the parser bounds over the whole request before the body is checked."""
    if schema.get("type", "object") != "object":
        raise Refused(NOT_AN_OBJECT_SCHEMA)
    storable_json(schema)
    try:
        check_schema(schema)
    except SchemaError as exc:
        raise Refused(f"The schema is not usable: {exc}") from None
    return schema


JsonSchemaObject = Annotated[
    dict[str, Any],
    AfterValidator(usable_object_schema),
    Field(description=SCHEMA_OBJECT),
    Refusal(by_error={"dict_type": NOT_AN_OBJECT_SCHEMA, "missing": NOT_AN_OBJECT_SCHEMA}),
]


def _image_url(url: str) -> str:
    if url.startswith("data:"):
        return url  # (decoded and checked by the parser: the image it holds)
    if url.startswith(("https://", "http://")) and len(url) <= MAX_IMAGE_URL_CHARS:
        return storable(url)
    raise Refused("An image URL must be a data URL or an http(s) URL.")


ImageUrl = Annotated[str, Field(min_length=1), AfterValidator(_image_url)]


def _json_object_text(value: Any) -> Any:
    """A tool call's arguments: the JSON object a string holds (empty: no arguments)."""
    if not isinstance(value, str):
        raise Refused(ARGUMENTS)
    try:
        parsed = json.loads(value) if value else {}
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise Refused(ARGUMENTS)
    return storable_json(parsed)


JsonObjectText = Annotated[
    dict[str, Any],
    BeforeValidator(_json_object_text),
    WithJsonSchema({"type": "string", "description": "A JSON object, as a string."}),
]


def content_parts(*members: type[Shape], send: str) -> Any:
    """The content parts a message takes: `members`, by their `type`."""
    return kinds(
        *members,
        refusal=Refusal(
            by_error={
                "union_tag_invalid": f"Content parts of type '{{tag}}' are not supported here; "
                f"send {send}.",
                "union_tag_not_found": f"A content part needs its `type`; send {send}.",
            }
        ),
    )


# -- the request's items ------------------------------------------------------------------
class ChatTextPart(Shape):
    """A text content part (the parts' texts are joined by newlines)."""

    type: Literal["text", "input_text", "output_text"]
    text: Annotated[Text, Refusal("A text part needs a `text` string.")]


class ChatImageUrl(Shape):
    url: ImageUrl
    detail: Annotated[str | None, Field(description="Ignored.")] = None


class ChatImagePart(Shape):
    __doc__ = (
        "An image, in a `user` message only (elsewhere a 400). `url` is a data URL "
        "(`data:image/<png|jpeg|gif|webp>;base64,...`, checked at once) or an http(s) URL of "
        f"at most {MAX_IMAGE_URL_CHARS} characters, fetched through the platform's guarded "
        "egress (no private addresses, redirects re-checked) once the API key is checked. "
        f"PNG, JPEG, GIF or WebP (the bytes must be what they claim), at most {MAX_IMAGE_MB} MB "
        f"each and {MAX_IMAGES} per request. The agent's model connection must take images: "
        "the offline demo connection and remote agents do not, nor do crews (400)."
    )

    type: Literal["image_url", "input_image"]
    image_url: Annotated[
        by_json_type(object=ChatImageUrl, string=ImageUrl),
        Field(description='`{"url": "..."}` (a `detail` is ignored), or the URL itself.'),
        Refusal("An image part needs its `url`."),
    ]


UserPart = content_parts(ChatTextPart, ChatImagePart, send="text or image_url parts")
TextPart = content_parts(ChatTextPart, send="text parts")


def _content(part: Any, description: str) -> Any:
    return Annotated[
        by_json_type(string=Text, array=list[part]) | None,
        Field(description=description + " No NUL characters."),
        Refusal(by_error=dict.fromkeys(NOT_A_KIND, CONTENT)),
    ]


class ChatFunctionCall(Shape):
    name: Annotated[
        str, Field(pattern=TOOL_NAME), Refusal("A tool call's `function.name` must be a tool name.")
    ]
    arguments: Annotated[
        JsonObjectText | None,
        Field(description="The arguments: a JSON object, as a string (empty: none)."),
        Refusal(ARGUMENTS),
    ] = None


class ChatToolCall(Shape):
    """A call the model made to one of the caller's `tools`, as OpenAI sends it; the caller
    runs it and sends the result back in a `tool` message."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        }
    )

    id: Annotated[
        Text,
        Field(
            min_length=1,
            description="The call's id, which the `tool` message with its result names as "
            "`tool_call_id`.",
        ),
        Refusal(A_TOOL_CALL),
    ]
    type: Literal["function"] = "function"
    function: Annotated[ChatFunctionCall, Refusal(A_TOOL_CALL)]


class ChatSystemMessage(Shape):
    """Added to the agent's own instructions (blank ones are left out)."""

    role: Literal["system", "developer"]
    content: _content(TextPart, "A string, a list of text parts, or null.") = None


class ChatUserMessage(Shape):
    """A turn of the user: text, and images."""

    role: Literal["user"]
    content: _content(
        UserPart, "A string, or a list of text and image parts (texts joined by newlines)."
    ) = None


class ChatAssistantMessage(Shape):
    """An earlier answer: its text, and the calls it made to the caller's tools (each
    answered by a `tool` message before the next other message). Assistant messages before
    the first user message, and a trailing one without tool calls, are not used."""

    role: Literal["assistant"]
    content: _content(TextPart, "A string, a list of text parts, or null (only calls).") = None
    tool_calls: Annotated[
        list[ChatToolCall] | None,
        Field(description="The calls the model made (as an earlier answer gave them)."),
    ] = None


class ChatToolMessage(Shape):
    """The result of a call of the caller's tool."""

    role: Literal["tool"]
    tool_call_id: Annotated[
        Text,
        Field(description="The `id` of the call, made by an earlier assistant message."),
        Refusal(TOOL_RESULT),
    ]
    content: _content(TextPart, "The result: a string, a list of text parts, or null.") = None


ChatMessage = TypeAliasType(
    "ChatMessage",
    Annotated[
        kinds(
            ChatSystemMessage,
            ChatUserMessage,
            ChatAssistantMessage,
            ChatToolMessage,
            by="role",
            refusal=Refusal(
                at="role",
                by_error=dict.fromkeys(NOT_A_KIND, ROLE),
                by_tag={"function": LEGACY_ROLE},
            ),
        ),
        Field(
            description="A message of the conversation, by its `role`. `system` and "
            "`developer` messages are added to the agent's instructions; the others are the "
            "turns the model sees, from the first `user` message on. Other fields (`name`, "
            "`refusal`, ...) are ignored; the legacy `function` role is a 400 (send `tool` "
            "messages)."
        ),
    ],
)


class ChatFunction(Shape):
    name: Annotated[
        str, Field(pattern=TOOL_NAME, description="Unique among `tools`."), Refusal(TOOL_NAME_RULE)
    ]
    description: Annotated[
        Text | None,
        Refusal(by_error={"string_type": "A tool's `description` must be a string."}),
    ] = None
    parameters: Annotated[
        JsonSchemaObject | None,
        Field(
            description="The arguments' JSON Schema (an object schema); omitted: "
            '`{"type": "object", "properties": {}}`. ' + SCHEMA_OBJECT
        ),
    ] = None
    strict: Annotated[bool | None, Field(description="Ignored.")] = None


class ChatTool(Shape):
    """A function tool the caller runs itself, offered to the model beside the agent's own
    tools (its name may not be one of theirs; a remote agent takes none). A call to it ends
    the answer with `finish_reason` `tool_calls`."""

    model_config = ConfigDict(
        json_schema_extra={
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
            }
        }
    )

    type: Literal["function"]
    function: Annotated[
        ChatFunction, Refusal(by_error={"model_type": EACH_TOOL, "missing": EACH_TOOL})
    ]


class ChatNamedFunction(Shape):
    name: str


class ChatNamedTool(Shape):
    type: Literal["function"]
    function: ChatNamedFunction


ChatToolChoice = TypeAliasType(
    "ChatToolChoice",
    Annotated[
        by_json_type(string=Literal["auto", "none", "required"], object=ChatNamedTool),
        Field(
            description="`auto` (the default, also for null), `none`, `required` (some tool "
            'must be called), or `{"type": "function", "function": {"name": ...}}` naming one '
            "of `tools`. `none` holds for every model call of the run; `required` and a named "
            "function for its first (later calls are `auto`)."
        ),
        Refusal(TOOL_CHOICE),
    ],
)


class ChatJsonSchema(Shape):
    """With `json_schema` (required there); `name`, `description` and `strict` are not
    used."""

    name: str | None = None
    description: str | None = None
    schema_: Annotated[JsonSchemaObject, Field(alias="schema")]
    strict: bool | None = None


class ChatResponseFormat(Shape):
    """`text` (the agent's own output format), `json_object` (any JSON object) or
    `json_schema` (an object matching `json_schema.schema`): the run's structured output,
    whose JSON is the answer's `content`. Not for crews (400)."""

    model_config = ConfigDict(
        json_schema_extra={
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
            }
        }
    )

    type: Literal["text", "json_object", "json_schema"]
    json_schema: ChatJsonSchema | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ChatResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise Refused(NOT_AN_OBJECT_SCHEMA, at="json_schema.schema")
        return self


# -- the request ---------------------------------------------------------------------------
def _positive(name: str, description: str) -> Any:
    return Annotated[
        int | None,
        Field(ge=1, description=description),
        Refusal(f"`{name}` must be a positive integer."),
    ]


class ChatSampling(Shape):
    """The sampling fields as a chat completion takes them (a gateway model's call is checked
    against these too, the rest of its body is the provider's to judge)."""

    temperature: Annotated[
        float | None,
        Field(
            ge=0,
            le=2,
            description="Replaces the agent's temperature for this run (not on Anthropic "
            "connections, which take no sampling options).",
        ),
        Refusal("`temperature` must be a number from 0 to 2."),
    ] = None
    top_p: Annotated[
        float | None,
        Field(
            ge=0, le=1, description="Nucleus sampling for this run (not on Anthropic connections)."
        ),
        Refusal("`top_p` must be a number from 0 to 1."),
    ] = None
    max_completion_tokens: _positive(
        "max_completion_tokens",
        f"Tokens per model response, {MAX_TOKENS_CAP}. With `max_tokens` too, the smaller applies.",
    ) = None
    max_tokens: _positive("max_tokens", "The older name of `max_completion_tokens`.") = None
    stop: Annotated[
        str
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_STOP)]
        | None,
        Field(description=f"A stop sequence, or a list of at most {MAX_STOP} non-empty ones."),
        Refusal(f"`stop` must be a string or a list of at most {MAX_STOP}."),
    ] = None
    seed: Annotated[
        int | None,
        Field(
            ge=-(2**63) + 1,
            le=2**63 - 1,
            description="Passed to the model provider (not on Anthropic connections).",
        ),
        Refusal("`seed` must be an integer."),
    ] = None


class ChatStreamOptions(Shape):
    """Options of a streamed answer; other keys are ignored."""

    include_usage: Annotated[
        bool | None,
        Field(
            description="With `stream`: end the stream (before `[DONE]`) with a chunk whose "
            "`choices` is empty and which carries `usage`."
        ),
        Refusal("`stream_options.include_usage` must be a bool."),
    ] = False


class ChatCompletionRequest(ChatSampling):
    __doc__ = (
        "Starts ONE run of the agent or crew named by `model`. The messages reach an agent as "
        "a conversation (its instructions, model and own tools apply; system and developer "
        "messages are added to its instructions); the run's recorded input is the last "
        "`user` message's text. A crew takes text turns only (no `tools`, tool calls or "
        "results, `response_format` or images: 400) and gets the conversation as one text, "
        "earlier turns as a transcript in front of the last user message (oldest dropped "
        f"first to fit {MAX_INPUT_CHARS} characters); sampling options do not reach its "
        "members. Fields not listed here (`frequency_penalty`, `presence_penalty`, "
        "`logprobs`, `parallel_tool_calls`, `metadata`, ...) are ignored."
    )

    model: Annotated[
        Text,
        Field(
            min_length=1,
            description="The slug of an active agent, or else of an active crew (see "
            "`GET /v1/models`).",
        ),
        Refusal("`model` is required: an agent or crew slug."),
    ]
    messages: Annotated[
        list[ChatMessage],
        Field(
            min_length=1,
            max_length=MAX_MESSAGES,
            description="The conversation: at least one `user` message, the last of which is "
            f"not blank and at most {MAX_INPUT_CHARS} characters; all the messages' text "
            f"together at most {MAX_CONVERSATION_CHARS} characters.",
        ),
        Refusal(
            "`messages` must be a non-empty list.",
            by_error={"too_long": f"At most {MAX_MESSAGES} messages."},
        ),
    ]
    stream: Annotated[
        bool | None,
        Field(
            description="Answer as server-sent events (`text/event-stream`) instead of one "
            "JSON object; null means false."
        ),
        Refusal("`stream` must be a bool."),
    ] = False
    stream_options: Annotated[
        ChatStreamOptions | None,
        Field(description="Options of a streamed answer (`ChatStreamOptions`)."),
        Refusal("`stream_options` must be an object."),
    ] = None
    tools: Annotated[
        list[kinds(ChatTool, refusal=Refusal(by_error=dict.fromkeys(NOT_A_KIND, EACH_TOOL)))]
        | None,
        Field(
            max_length=MAX_TOOLS,
            description=f"At most {MAX_TOOLS} function tools the caller runs itself.",
        ),
        Refusal(f"`tools` must be a list of at most {MAX_TOOLS} tools."),
    ] = None
    tool_choice: Annotated[
        ChatToolChoice | None,
        Field(description="Which tool the model must call, if any (see `ChatToolChoice`)."),
    ] = None
    response_format: Annotated[
        ChatResponseFormat | None,
        Field(description="The run's output format; null: the agent's own."),
        Refusal(RESPONSE_FORMAT),
    ] = None
    n: Annotated[
        int | None,
        Field(ge=1, le=1, description="Only one choice per request: any other value is a 400."),
        Refusal("Only one choice per request is supported: send `n` = 1 or omit it."),
    ] = None
    user: Annotated[
        Text | None,
        Field(
            max_length=MAX_USER_CHARS,
            description="The caller's id for its own end user; recorded with the run.",
        ),
        Refusal(f"`user` must be a string of at most {MAX_USER_CHARS} characters."),
    ] = None


# -- the answer ----------------------------------------------------------------------------
FinishReason = Literal["stop", "length", "tool_calls"]
CHAT_ID = "^chatcmpl-[0-9]+$"


class ChatCompletionUsage(Shape):
    """The run's tokens, over all its model calls (and a crew's members')."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionMessage(Shape):
    role: Literal["assistant"]
    content: Annotated[
        str | None,
        Field(
            description="The run's output (with `response_format`, the JSON of its structured "
            "output); for a run parked for a human's approval, followed by a note naming the "
            "run and the URLs where each call is approved or rejected. Null when the answer "
            "is only `tool_calls`."
        ),
    ]
    refusal: Annotated[str | None, Field(description="Always null.")]
    tool_calls: Annotated[
        list[ChatToolCall],
        Field(
            min_length=1,
            description="Only with `finish_reason` `tool_calls`: the calls of the caller's "
            "tools for it to run. Send them back as the assistant message, then a `tool` "
            "message per call with its result, in the next request (a new run).",
        ),
    ] = None  # type: ignore[assignment]  # (absent, never null)


class ChatCompletionChoice(Shape):
    index: Literal[0]
    message: ChatCompletionMessage
    logprobs: Annotated[dict[str, Any] | None, Field(description="Always null.")]
    finish_reason: Annotated[
        FinishReason,
        Field(
            description="`tool_calls` when the model called the caller's tools "
            "(`message.tool_calls`), `length` when the run hit its round limit, else `stop` "
            "(also for a run awaiting approval)."
        ),
    ]


class ChatCompletion(Shape):
    """The answer of a finished (or approval-parked) run."""

    model_config = ConfigDict(
        json_schema_extra={
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
            }
        }
    )

    id: Annotated[
        str,
        Field(
            pattern=CHAT_ID,
            description="`chatcmpl-<run id>`: the run is at `/api/v1/runs/<run id>`.",
        ),
    ]
    object: Literal["chat.completion"]
    created: Annotated[int, Field(description="When the run was created.")]
    model: Annotated[str, Field(description="The requested `model`.")]
    choices: Annotated[list[ChatCompletionChoice], Field(min_length=1, max_length=1)]
    usage: ChatCompletionUsage
    system_fingerprint: Annotated[str | None, Field(description="Always null.")] = None


class ChatChunkFunction(Shape):
    name: str
    arguments: Annotated[str, Field(description="A JSON object, as text.")]


class ChatCompletionChunkToolCall(Shape):
    """A call of one of the caller's tools, streamed whole in one chunk (the name and all the
    arguments at once)."""

    index: Annotated[int, Field(ge=0, description="The call's position.")]
    id: str
    type: Literal["function"]
    function: ChatChunkFunction


class ChatCompletionChunkDelta(Shape):
    """The first chunk's is `{"role": "assistant", "content": ""}`, text chunks'
    `{"content": "..."}`, a tool call's `{"tool_calls": [...]}`, the finish chunk's `{}`."""

    role: Literal["assistant"] = None  # type: ignore[assignment]  # (absent, never null)
    content: str = None  # type: ignore[assignment]
    tool_calls: Annotated[list[ChatCompletionChunkToolCall], Field(min_length=1, max_length=1)] = (
        None  # type: ignore[assignment]
    )


class ChatCompletionChunkChoice(Shape):
    index: Literal[0]
    delta: ChatCompletionChunkDelta
    logprobs: Annotated[dict[str, Any] | None, Field(description="Always null.")]
    finish_reason: Annotated[
        FinishReason | None,
        Field(description="Null but on the finish chunk (see `ChatCompletionChoice`)."),
    ]


class ChatCompletionChunk(Shape):
    """One `data:` line of a streamed answer (see `POST /v1/chat/completions`)."""

    id: Annotated[str, Field(pattern=CHAT_ID)]
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: Annotated[
        list[ChatCompletionChunkChoice],
        Field(min_length=0, max_length=1, description="One choice; empty in the usage chunk."),
    ]
    usage: Annotated[
        ChatCompletionUsage,
        Field(description="Only in the last chunk, with `stream_options.include_usage`."),
    ] = None  # type: ignore[assignment]  # (absent, never null)


class ChatCompletionStreamEvent(Shape):
    """One server-sent event of a streamed chat completion (OpenAPI 3.0 describes an event
    stream by the schema of each event). Its `data` is a `ChatCompletionChunk` as JSON, an
    `OpenAIError` as JSON (a failed or cancelled run), or `[DONE]` (the last event). No
    `event`, `id` or `retry` fields are sent."""

    data: Annotated[str, Field(pattern="^(\\{.*\\}|\\[DONE\\])$")]
