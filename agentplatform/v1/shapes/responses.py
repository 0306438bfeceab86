"""OpenAI's Responses API on the wire (`POST /v1/responses`, `GET /v1/responses/{id}`): the
request, checked here item by item as far as translating it into a chat completion's needs
(agentplatform.v1.responses_wire; an agent's is then checked as a chat completion), and
the response object with its stream events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, model_validator
from typing_extensions import TypeAliasType

from agentplatform.v1.shapes.base import (
    Refusal,
    Refused,
    Shape,
    Text,
    by_json_type,
    kinds,
    unchecked,
)
from agentplatform.v1.shapes.chat import (
    CONTENT,
    MAX_TOKENS_CAP,
    MAX_TOOLS,
    MAX_USER_CHARS,
    SCHEMA_OBJECT,
    TOOL_NAME,
    ChatTextPart,
    ImageUrl,
    content_parts,
)

RESPONSE_ID = "^resp_[0-9]+$"
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
ResponseEventType = Literal[RESPONSE_EVENTS]  # type: ignore[valid-type]
RESPONSES_ROLES = ("user", "assistant", "system", "developer")


# -- the request's items ------------------------------------------------------------------
# They are checked as far as translating them into a chat completion's needs; a gateway
# model's provider judges the rest, an agent's request is then checked as a chat completion.
SENT_SCHEMA = Annotated[
    dict[str, Any],
    Field(description=SCHEMA_OBJECT + " For an agent, checked as a chat completion's."),
]
CALL = "A `function_call` item needs `call_id`, `name` and `arguments` strings."
ROLE = f"A message's `role` must be one of {', '.join(RESPONSES_ROLES)}."
TOOL_CHOICE = (
    '`tool_choice` must be "auto", "none", "required" or {"type": "function", "name": ...}.'
)
TEXT_FORMAT = (
    '`text.format` must be {"type": "text"}, {"type": "json_object"} or '
    '{"type": "json_schema", "name": ..., "schema": {...}}.'
)
NOT_A_KIND = ("union_tag_invalid", "union_tag_not_found")


class ResponsesInputImage(Shape):
    """An image in a `user` message: `image_url` is a data URL or an http(s) URL, taken as
    `ChatImagePart`'s (same formats, sizes and limits; `file_id` is not supported)."""

    type: Literal["input_image"]
    image_url: Annotated[ImageUrl, Refusal(by_error={"missing": "An image part needs its `url`."})]
    detail: Annotated[str | None, Field(description="Ignored.")] = None


class ResponsesInputFile(Shape):
    """A file, for a gateway model's provider (an agent takes none: 400)."""

    type: Literal["input_file"]
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class ResponsesInputMessage(Shape):
    """A message: `system` and `developer` ones are added to the agent's instructions, the
    others are the conversation's turns (as a chat completion's messages)."""

    type: Literal["message"] = "message"
    role: Annotated[Literal[RESPONSES_ROLES], Refusal(ROLE)]  # type: ignore[valid-type]
    content: Annotated[
        by_json_type(
            string=Text,
            array=list[
                content_parts(
                    ChatTextPart,
                    ResponsesInputImage,
                    ResponsesInputFile,
                    send="input_text or input_image parts",
                )
            ],
        )
        | None,
        Field(
            description="A string, or a list of text parts (`input_text`, `output_text`) and, "
            "in `user` messages, `input_image` parts; null: no text."
        ),
        Refusal(by_error=dict.fromkeys(NOT_A_KIND, CONTENT)),
    ] = None


class ResponsesInputFunctionCall(Shape):
    """A call the model made to one of the caller's tools (as an earlier response's
    `function_call` output item); consecutive calls form one assistant turn."""

    type: Literal["function_call"]
    call_id: Annotated[Text, Field(min_length=1), Refusal(CALL)]
    name: Annotated[
        str,
        Field(pattern=TOOL_NAME),
        Refusal(
            "A `function_call` item's `name` must be a tool name: 1-64 letters, digits, `_` "
            "or `-`.",
            by_error={"missing": CALL, "string_type": CALL},
        ),
    ]
    arguments: Annotated[str, Field(description="A JSON object, as text."), Refusal(CALL)]


class ResponsesInputFunctionCallOutput(Shape):
    """The result of a call, which an earlier item of `input` (or the previous response)
    made; every call needs its result before the next message."""

    type: Literal["function_call_output"]
    call_id: Annotated[
        Text, Field(min_length=1), Refusal("A `function_call_output` item needs its `call_id`.")
    ]
    output: Annotated[
        Any,
        Field(description="The result: a string, or any JSON (sent to the model as JSON text)."),
    ] = None


class ResponsesInputReasoning(Shape):
    type: Literal["reasoning"]


ResponsesInputItem = TypeAliasType(
    "ResponsesInputItem",
    Annotated[
        kinds(
            ResponsesInputMessage,
            ResponsesInputFunctionCall,
            ResponsesInputFunctionCallOutput,
            ResponsesInputReasoning,
            absent="message",
            refusal=Refusal(
                by_error={
                    "union_tag_invalid": "Input items of type '{tag}' are not supported.",
                    "union_tag_not_found": "An input item must be an object: a message, a "
                    "function_call or a function_call_output.",
                }
            ),
        ),
        Field(
            description="An item of `input`, by its `type` (a message's may be left out). "
            "`reasoning` items are skipped; any other type (`web_search_call`, "
            "`item_reference`, ...) is a 400."
        ),
    ],
)


class ResponsesTool(Shape):
    """A function tool the caller runs itself (as `ChatTool`, flat). Only function tools:
    built-in ones (`web_search`, `file_search`, ...) are a 400, the agent's own tools run on
    the platform."""

    type: Literal["function"]
    name: Annotated[
        str,
        Field(pattern=TOOL_NAME),
        Refusal("A function tool needs its `name`: 1-64 letters, digits, `_` or `-`."),
    ]
    description: Text | None = None
    parameters: SENT_SCHEMA | None = None
    strict: Annotated[bool | None, Field(description="Ignored.")] = None


class ResponsesNamedTool(Shape):
    type: Literal["function"]
    name: str


class ResponsesTextFormat(Shape):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str | None, Field(description="Not used.")] = None
    description: Annotated[str | None, Field(description="Not used.")] = None
    schema_: Annotated[
        SENT_SCHEMA | None, Field(alias="schema", description="Required with `json_schema`.")
    ] = None
    strict: Annotated[bool | None, Field(description="Ignored.")] = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponsesTextFormat:
        if self.type == "json_schema" and self.schema_ is None:
            raise Refused("A `json_schema` format needs its `schema`.", at="schema")
        return self


class ResponsesText(Shape):
    format: Annotated[ResponsesTextFormat | None, Refusal(TEXT_FORMAT)] = None


# -- the request ---------------------------------------------------------------------------
class ResponsesRequest(Shape):
    """Starts ONE run of the agent (or crew) named by `model`; the body is taken as the
    matching Chat Completions request (see `ChatCompletionRequest`), so it is accepted and
    refused alike. `previous_response_id` puts the earlier response's conversation (its
    run's turns, as the model saw them; not its instructions) in front of `input`. Fields not
    listed here (`metadata`, `parallel_tool_calls`, `reasoning`, `truncation`, `include`,
    ...) are ignored."""

    model: Annotated[
        str,
        Field(
            min_length=1,
            description="The slug of an active agent, or else of an active crew (whose "
            "response can be neither read back nor continued); or a gateway model, "
            "`<connection>/<model>`.",
        ),
        Refusal("`model` is required: an agent or crew slug."),
    ]
    input: Annotated[
        by_json_type(string=Text, array=Annotated[list[ResponsesInputItem], Field(min_length=1)]),
        Field(
            description="The new turn: a string (one user message) or a non-empty list of "
            "items. Its last message is a `user` one (or it ends with function call outputs)."
        ),
        Refusal("`input` must be a string or a non-empty list of items."),
    ]
    instructions: Annotated[
        str | None,
        Field(description="Added to the agent's own instructions, for this response only."),
        Refusal("`instructions` must be a string."),
    ] = None
    tools: Annotated[
        list[
            kinds(
                ResponsesTool,
                refusal=Refusal(
                    by_error={
                        "union_tag_invalid": "Only function tools are supported (not '{tag}'): "
                        "the agent's own tools run on the platform.",
                        "union_tag_not_found": "Each tool must be a function tool: "
                        '{"type": "function", "name": ...}.',
                    }
                ),
            )
        ]
        | None,
        Field(max_length=MAX_TOOLS, description=f"At most {MAX_TOOLS} function tools."),
        Refusal(
            "`tools` must be a list.",
            by_error={"too_long": f"`tools` must be a list of at most {MAX_TOOLS} tools."},
        ),
    ] = None
    tool_choice: Annotated[
        by_json_type(string=Literal["auto", "none", "required"], object=ResponsesNamedTool) | None,
        Field(
            description='`auto`, `none`, `required`, or `{"type": "function", "name": ...}` '
            "naming one of `tools`."
        ),
        Refusal(TOOL_CHOICE),
    ] = None
    text: Annotated[
        ResponsesText | None,
        Field(
            description="The output format: `text`, `json_object`, or `json_schema` with its "
            "`schema` (an object schema) beside `type`: the run's structured output, whose "
            "JSON is the message's text. Not for crews (400)."
        ),
        Refusal(by_error={"model_type": '`text` must be {"format": {...}}.'}),
    ] = None
    temperature: Annotated[
        unchecked(Annotated[float, Field(ge=0, le=2)]) | None,
        Field(description="As a chat completion's."),
    ] = None
    top_p: Annotated[
        unchecked(Annotated[float, Field(ge=0, le=1)]) | None,
        Field(description="As a chat completion's."),
    ] = None
    max_output_tokens: Annotated[
        unchecked(Annotated[int, Field(ge=1)]) | None,
        Field(description=f"Tokens per model response, {MAX_TOKENS_CAP}."),
    ] = None
    user: Annotated[
        unchecked(Annotated[str, Field(max_length=MAX_USER_CHARS)]) | None,
        Field(description="As a chat completion's."),
    ] = None
    stream: Annotated[
        unchecked(bool) | None,
        Field(description="Answer as typed server-sent events (`ResponseStreamEvent`)."),
    ] = False
    store: Annotated[
        bool,
        Field(
            description="`false`: the response can be neither read back "
            "(`GET /v1/responses/{response_id}`) nor continued (`previous_response_id`); the "
            "run itself is recorded as any run."
        ),
        Refusal("`store` must be a boolean."),
    ] = True
    previous_response_id: Annotated[
        unchecked(Annotated[str, Field(pattern=RESPONSE_ID)]) | None,
        Field(
            description="A finished, stored response of an agent that the key may read (its "
            "own runs, or every run for an admin's key): this response continues its "
            "conversation.",
        ),
    ] = None


# -- the answer ----------------------------------------------------------------------------
class InputTokensDetails(Shape):
    cached_tokens: Literal[0]


class OutputTokensDetails(Shape):
    reasoning_tokens: Literal[0]


class ResponseUsage(Shape):
    """The run's tokens, over all its model calls."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseOutputText(Shape):
    type: Literal["output_text"]
    text: str
    annotations: Annotated[list[Any], Field(max_length=0)]


class ResponseOutputMessage(Shape):
    """The run's text: its output (with `text.format`, the JSON of its structured output),
    and for a run parked for a human's approval a note naming the run and the URLs where
    each call is approved or rejected."""

    type: Literal["message"]
    id: Annotated[str, Field(pattern="^msg_[0-9]+$", description="`msg_<run id>`.")]
    status: Annotated[
        Literal["completed", "in_progress"],
        Field(
            description="`in_progress` (with no content yet) only in the stream's "
            "`response.output_item.added`."
        ),
    ]
    role: Literal["assistant"]
    content: Annotated[list[ResponseOutputText], Field(max_length=1)]


class ResponseFunctionCall(Shape):
    """A call of one of the caller's tools: the response ends with it, and the caller sends
    its result as a `function_call_output` item of the next request (with
    `previous_response_id`, or with the call itself in `input`)."""

    type: Literal["function_call"]
    id: Annotated[str, Field(pattern="^fc_", description="`fc_<call_id>`.")]
    call_id: str
    name: str
    arguments: Annotated[
        str,
        Field(
            description="A JSON object, as text (empty in the stream's "
            "`response.output_item.added`)."
        ),
    ]
    status: Literal["completed", "in_progress"]


class ResponseOutputItem(
    RootModel[Annotated[ResponseOutputMessage | ResponseFunctionCall, Field(discriminator="type")]]
):
    """An item of a response's `output`: at most one `message`, then the `function_call`s."""


class ResponseError(Shape):
    """Only with `status` `failed`."""

    code: Literal["server_error"]
    message: str


class ResponseIncompleteDetails(Shape):
    """Only with `status` `incomplete`."""

    reason: Literal["max_output_tokens"]


class ResponseTextFormat(Shape):
    type: Literal["text"]


class ResponseText(Shape):
    """Always `{"format": {"type": "text"}}` (not echoed)."""

    format: ResponseTextFormat


class Response(Shape):
    """A response: one run of an agent (or crew), as OpenAI's Responses API shapes it."""

    model_config = ConfigDict(
        json_schema_extra={
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
                        "content": [
                            {"type": "output_text", "text": "Let me look.", "annotations": []}
                        ],
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
            }
        }
    )

    id: Annotated[
        str,
        Field(
            pattern=RESPONSE_ID,
            description="`resp_<run id>`: the run is at `/api/v1/runs/<run id>`.",
        ),
    ]
    object: Literal["response"]
    created_at: Annotated[int, Field(description="When the run was created.")]
    status: Annotated[
        Literal["completed", "incomplete", "in_progress", "failed"],
        Field(
            description="`completed` (also for a run awaiting approval, or one that ended with "
            "calls of the caller's tools); `incomplete` when the run hit its round limit; "
            "`in_progress` while it goes on (the stream's first events, or read back early: no "
            "output yet); `failed` for a failed or cancelled run (streamed or read back; "
            "`error` says why)."
        ),
    ]
    model: Annotated[str, Field(description="The requested `model` (read back: the agent's slug).")]
    output: list[ResponseOutputItem]
    usage: Annotated[ResponseUsage | None, Field(description="Null while the run goes on.")]
    error: ResponseError | None
    incomplete_details: ResponseIncompleteDetails | None
    instructions: Annotated[str | None, Field(description="Always null.")]
    tools: Annotated[list[Any], Field(max_length=0, description="Always empty.")]
    tool_choice: Annotated[Literal["auto"], Field(description="Always `auto`.")]
    parallel_tool_calls: bool
    previous_response_id: Annotated[str | None, Field(description="Always null (not echoed).")]
    metadata: Annotated[dict[str, Any], Field(description="Always empty.")]
    text: ResponseText


class ResponseEvent(Shape):
    """The JSON of one typed event of a streamed response (its `data`); which other fields
    it has depends on `type` (see `POST /v1/responses`)."""

    type: ResponseEventType
    sequence_number: Annotated[int, Field(ge=1, description="1, 2, 3, ... in the order sent.")]
    response: Annotated[
        Response,
        Field(
            description="`response.created`, `response.in_progress` (`in_progress`, no "
            "output), `response.completed` (the whole response), `response.failed`."
        ),
    ] = None  # type: ignore[assignment]  # (absent, never null: as the fields below)
    output_index: Annotated[int, Field(ge=0)] = None  # type: ignore[assignment]
    item: Annotated[
        ResponseOutputItem,
        Field(
            description="`response.output_item.added` (in progress) and "
            "`response.output_item.done` (complete)."
        ),
    ] = None  # type: ignore[assignment]
    item_id: Annotated[str, Field(description="The output item's `id`.")] = None  # type: ignore[assignment]
    content_index: Literal[0] = None  # type: ignore[assignment]
    part: ResponseOutputText = None  # type: ignore[assignment]
    delta: Annotated[
        str,
        Field(
            description="`response.output_text.delta`: more text; "
            "`response.function_call_arguments.delta`: the call's arguments (all of them)."
        ),
    ] = None  # type: ignore[assignment]
    text: Annotated[str, Field(description="`response.output_text.done`: all text.")] = None  # type: ignore[assignment]
    arguments: Annotated[
        str, Field(description="`response.function_call_arguments.done`: the arguments.")
    ] = None  # type: ignore[assignment]
    logprobs: Annotated[list[Any], Field(max_length=0)] = None  # type: ignore[assignment]


class ResponseStreamEvent(Shape):
    """One server-sent event of a streamed response: `event` is the event's type and `data`
    a `ResponseEvent` as JSON. No `id`, `retry` or `[DONE]`: the stream ends after
    `response.completed` or `response.failed`."""

    event: ResponseEventType
    data: Annotated[str, Field(pattern="^\\{.*\\}$")]
