"""Anthropic's Messages API on the wire (`POST /v1/messages`, `/v1/messages/count_tokens`):
the request, checked here item by item (a turn, its content blocks, a tool, the tool choice)
as far as translating it into a chat completion's needs (agentplatform.v1.messages_wire; an
agent's is then checked as a chat completion), and the answer: a `message`, its stream's
events, Anthropic's error shape.

A gateway model of an Anthropic connection is not checked here: its body goes to the
provider as it came (agentplatform.v1.gateway), which judges it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator
from typing_extensions import TypeAliasType

from agentplatform.v1.shapes.base import (
    Refusal,
    Refused,
    Shape,
    Text,
    by_json_type,
    kinds,
)
from agentplatform.v1.shapes.chat import MAX_STOP, MAX_USER_CHARS, SCHEMA_OBJECT, TOOL_NAME

NOT_A_KIND = ("union_tag_invalid", "union_tag_not_found")
ANTHROPIC_ERROR_TYPES = {  # an error's `type` by its status (else `api_error`)
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
ROLE = "Each message's `role` must be `user` or `assistant`."
CONTENT = "`content` must be a string or a list of blocks."
IMAGE_SOURCE = "An image block's `source` must be base64 or url."
TOOL_RESULT_TEXT = "A `tool_result` block's content must be text."
CUSTOM_TOOLS = "Only custom tools (name, description, input_schema) are supported."
TOOL_CHOICE = "`tool_choice.type` must be auto, any, tool or none."
SYSTEM = "`system` must be a string or a list of text blocks."
TOOL_NAME_RULE = "A tool's `name` must be 1-64 letters, digits, `_` or `-`."
THREAD_ID = "^msg_[0-9]{1,18}$"
THREAD = "`thread` must be the `id` of an earlier message: `msg_` and its digits."


def blocks(*members: type[Shape], where: str) -> Any:
    """The content blocks `where` takes: `members`, by their `type`."""
    return kinds(
        *members,
        refusal=Refusal(
            by_error={
                "union_tag_invalid": f"Blocks of type '{{tag}}' are not supported in {where}.",
                "union_tag_not_found": f"Each block needs its `type` ({where}).",
            }
        ),
    )


# -- the request's items ------------------------------------------------------------------
class AnthropicTextBlock(Shape):
    type: Literal["text"]
    text: Annotated[Text, Refusal("A text block needs a `text` string.")]


class AnthropicBase64Source(Shape):
    type: Literal["base64"]
    media_type: Annotated[str, Field(description="`image/png`, `image/jpeg`, ...")]
    data: Annotated[str, Field(description="The image, base64.")]


class AnthropicUrlSource(Shape):
    type: Literal["url"]
    url: Annotated[str, Field(description="An http(s) URL, fetched as a chat's image URL.")]


class AnthropicImageBlock(Shape):
    """An image, in a `user` message: as a chat completion's image part (same formats,
    sizes and limits)."""

    type: Literal["image"]
    source: Annotated[
        kinds(
            AnthropicBase64Source,
            AnthropicUrlSource,
            refusal=Refusal(by_error=dict.fromkeys(NOT_A_KIND, IMAGE_SOURCE)),
        ),
        Refusal(IMAGE_SOURCE),
    ]


class AnthropicToolUseBlock(Shape):
    """A call an earlier answer made to one of the caller's tools."""

    type: Literal["tool_use"]
    id: Annotated[Text, Field(min_length=1)]
    name: Annotated[str, Field(pattern=TOOL_NAME)]
    input: Annotated[dict[str, Any], Refusal("A `tool_use` block's `input` must be an object.")]


class AnthropicToolResultBlock(Shape):
    """The result of a call, which the assistant message before made."""

    type: Literal["tool_result"]
    tool_use_id: Annotated[Text, Field(min_length=1)]
    content: Annotated[
        by_json_type(
            string=Text,
            array=list[blocks(AnthropicTextBlock, where="a tool_result")],
        )
        | None,
        Field(description="Text: a string or text blocks (joined by newlines)."),
        Refusal(TOOL_RESULT_TEXT),
    ] = None
    is_error: Annotated[
        bool | None, Field(description="The model reads the result as `error: <text>`.")
    ] = None


def _content(*members: type[Shape], where: str) -> Any:
    return Annotated[
        by_json_type(string=Text, array=list[blocks(*members, where=where)]),
        Refusal(by_error=dict.fromkeys(NOT_A_KIND, CONTENT)),
    ]


class AnthropicUserMessage(Shape):
    """A user turn: text, images and the results of the calls the turn before made."""

    role: Literal["user"]
    content: _content(
        AnthropicTextBlock, AnthropicImageBlock, AnthropicToolResultBlock, where="user messages"
    )


class AnthropicAssistantMessage(Shape):
    """An earlier answer: its text and its calls of the caller's tools."""

    role: Literal["assistant"]
    content: _content(AnthropicTextBlock, AnthropicToolUseBlock, where="assistant messages")


AnthropicMessageParam = TypeAliasType(
    "AnthropicMessageParam",
    Annotated[
        kinds(
            AnthropicUserMessage,
            AnthropicAssistantMessage,
            by="role",
            refusal=Refusal(at="role", by_error=dict.fromkeys(NOT_A_KIND, ROLE)),
        ),
        Field(description="A turn of the conversation, by its `role`."),
    ],
)


class AnthropicTool(Shape):
    """A custom tool the caller runs itself, as a chat completion's (its name may not be
    one of the agent's). Anthropic's server tools (`web_search_...`, ...) are a 400."""

    type: Annotated[Literal["custom"], Field(description="Optional.")] = "custom"
    name: Annotated[str, Field(pattern=TOOL_NAME), Refusal(TOOL_NAME_RULE)]
    description: Text | None = None
    input_schema: Annotated[dict[str, Any], Field(description=SCHEMA_OBJECT), Refusal(CUSTOM_TOOLS)]


class AnthropicToolChoice(Shape):
    """`auto`, `any` (some tool must be called), `none`, or `tool` with the `name` of one of
    `tools`; `disable_parallel_tool_use` is ignored."""

    type: Literal["auto", "any", "tool", "none"]
    name: Annotated[str | None, Field(description="With `tool` (required there).")] = None
    disable_parallel_tool_use: Annotated[bool | None, Field(description="Ignored.")] = None

    @model_validator(mode="after")
    def _named(self) -> AnthropicToolChoice:
        if self.type == "tool" and self.name is None:
            raise Refused("A `tool` choice needs the tool's `name`.", at="name")
        return self


class AnthropicMetadata(Shape):
    user_id: Annotated[
        Text | None,
        Field(
            max_length=MAX_USER_CHARS,
            description="The caller's id for its own end user (a chat completion's `user`).",
        ),
        Refusal(f"`metadata.user_id` must be a string of at most {MAX_USER_CHARS} characters."),
    ] = None


# -- the request ---------------------------------------------------------------------------
class AnthropicMessagesRequest(Shape):
    """Starts ONE run of the agent (or crew) named by `model`, as `POST /v1/chat/completions`
    does: the body is taken as the matching Chat Completions request (`system` as a system
    message, `tool_use` blocks as tool calls, `tool_result` blocks as tool messages,
    `stop_sequences` as `stop`, `metadata.user_id` as `user`), so it is accepted and
    refused alike. Fields not listed here (`top_k`, `thinking`, `service_tier`, ...) are
    ignored."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "model": "assistant",
                "max_tokens": 1024,
                "system": "Answer in one sentence.",
                "messages": [{"role": "user", "content": "What is 6*7?"}],
            }
        }
    )

    model: Annotated[
        Text,
        Field(
            min_length=1,
            description="The slug of an active agent, or else of an active crew; or a gateway "
            "model, `<connection>/<model>` (an Anthropic connection's is sent on as it came).",
        ),
        Refusal("`model` is required: an agent or crew slug."),
    ]
    max_tokens: Annotated[
        int,
        Field(ge=1, description="Tokens per model response, as a chat's `max_tokens`."),
        Refusal(
            "`max_tokens` must be a positive integer.",
            by_error={"missing": "`max_tokens` is required."},
        ),
    ]
    messages: Annotated[
        list[AnthropicMessageParam],
        Field(min_length=1, description="The conversation, from a `user` turn on."),
        Refusal("`messages` must be a non-empty list."),
    ]
    system: Annotated[
        by_json_type(string=Text, array=list[blocks(AnthropicTextBlock, where="`system`")]) | None,
        Field(description="Added to the agent's own instructions."),
        Refusal(by_error=dict.fromkeys(NOT_A_KIND, SYSTEM)),
    ] = None
    temperature: Annotated[
        float | None,
        Field(ge=0, le=2, description="As a chat completion's."),
        Refusal("`temperature` must be a number from 0 to 2."),
    ] = None
    top_p: Annotated[
        float | None,
        Field(ge=0, le=1, description="As a chat completion's."),
        Refusal("`top_p` must be a number from 0 to 1."),
    ] = None
    stop_sequences: Annotated[
        list[Annotated[Text, Field(min_length=1)]] | None,
        Field(max_length=MAX_STOP, description=f"At most {MAX_STOP} non-empty ones."),
        Refusal(f"`stop_sequences` must be a list of at most {MAX_STOP} non-empty strings."),
    ] = None
    stream: Annotated[
        bool | None,
        Field(description="Answer as Anthropic streams (`AnthropicStreamEvent`)."),
        Refusal("`stream` must be a boolean."),
    ] = None
    metadata: Annotated[
        AnthropicMetadata | None, Refusal(by_error={"model_type": "`metadata` must be an object."})
    ] = None
    tools: Annotated[
        list[
            kinds(
                AnthropicTool,
                absent="custom",
                refusal=Refusal(
                    by_error={
                        "union_tag_invalid": "Only custom tools (name, description, "
                        "input_schema) are supported, not '{tag}'.",
                        "union_tag_not_found": CUSTOM_TOOLS,
                    }
                ),
            )
        ]
        | None,
        Field(description="Custom tools the caller runs itself."),
        Refusal(by_error={"list_type": "`tools` must be a list."}),
    ] = None
    tool_choice: Annotated[AnthropicToolChoice | None, Refusal(TOOL_CHOICE)] = None
    thread: Annotated[
        str | None,
        Field(
            pattern=THREAD_ID,
            description="Not Anthropic's: the `id` of an earlier answer (`msg_<run id>`) "
            "whose conversation this continues, as `previous_response_id` does on "
            "`/v1/responses`; `messages` then holds only the new turn (a lone "
            "`tool_result` may answer that answer's `tool_use`). Agents only.",
        ),
        Refusal(THREAD),
    ] = None


class AnthropicCountTokensRequest(AnthropicMessagesRequest):
    """What `POST /v1/messages` takes, `max_tokens` and `stream` not needed: counted, not
    run."""

    max_tokens: Annotated[
        int | None,
        Field(ge=1, description="Not used."),
        Refusal("`max_tokens` must be a positive integer."),
    ] = None


# -- the answer ----------------------------------------------------------------------------
class AnthropicResponseText(Shape):
    type: Literal["text"]
    text: str


class AnthropicResponseToolUse(Shape):
    """A call of one of the caller's tools: the caller runs it and sends the result as a
    `tool_result` block of the next request (a new run), alone with `thread`."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class AnthropicUsage(Shape):
    input_tokens: int
    output_tokens: int


class AnthropicMessage(Shape):
    """The answer of a finished (or approval-parked) run: its text, then the calls of the
    caller's tools. A gateway model of an Anthropic connection answers with its provider's
    own `message`, which may hold more."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "id": "msg_42",
                "type": "message",
                "role": "assistant",
                "model": "assistant",
                "content": [{"type": "text", "text": "It is 42."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 30, "output_tokens": 9},
            }
        }
    )

    id: Annotated[str, Field(description="`msg_<run id>`: the run is at `/api/v1/runs/<run id>`.")]
    type: Literal["message"]
    role: Literal["assistant"]
    model: Annotated[str, Field(description="The requested `model`.")]
    content: list[
        Annotated[AnthropicResponseText | AnthropicResponseToolUse, Field(discriminator="type")]
    ]
    stop_reason: Annotated[
        str | None,
        Field(
            description="`tool_use` when the model called the caller's tools, `max_tokens` "
            "when the run hit its round limit, else `end_turn`; null in `message_start`."
        ),
    ]
    stop_sequence: Annotated[str | None, Field(description="Null.")]
    usage: AnthropicUsage


class AnthropicTokenCount(Shape):
    """A rough count (4 characters a token) of what the model would read."""

    input_tokens: Annotated[int, Field(ge=1)]


class AnthropicErrorBody(Shape):
    type: Annotated[
        str,
        Field(
            description="`invalid_request_error` (400, 405), `authentication_error` (401), "
            "`permission_error` (403), `not_found_error` (404), `request_too_large` (413), "
            "`rate_limit_error` (429), `api_error` (500, 502, 503)."
        ),
    ]
    message: str


class AnthropicError(Shape):
    """Anthropic's error shape, used by every `/v1/messages` error response."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "`max_tokens` is required."},
            }
        }
    )

    type: Literal["error"]
    error: AnthropicErrorBody


ANTHROPIC_EVENTS = (
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
)


class AnthropicStreamEvent(Shape):
    """One server-sent event of a streamed message: `event` is its type and `data` its JSON
    (with the same `type`): `message_start` (the message, no content), per block
    `content_block_start`, `content_block_delta`s (`text_delta`, or one `input_json_delta`
    with a call's whole input) and `content_block_stop`, then `message_delta` (`stop_reason`,
    usage) and `message_stop`; `ping` while the run is quiet; `error` (a failed or
    cancelled run) instead of the end."""

    event: Literal[ANTHROPIC_EVENTS]  # type: ignore[valid-type]
    data: Annotated[str, Field(pattern="^\\{.*\\}$")]
