"""A Chat Completions request body, checked and turned into what a run takes.

The body's shape, item by item, is checked by its pydantic shape
(agentplatform.v1.shapes.chat: roles, content parts, tool calls, tools and their schemas,
the tool choice, the output format); what is left here spans the items: a tool result
answers an earlier call and every call is answered, tool names are unique, the tool choice
names one of them, totals (images, characters, schemas) hold. A bad request is a 400 naming
the field (OpenAI's `param`); nothing a caller writes reaches a library unchecked. The
messages become structured turns (agents.runtime.client_request): system and developer
messages join the agent's instructions, assistant tool calls and tool results stay what
they are, so the model sees the conversation the caller had. A plain request (one user
message, no options) needs none of it: it runs as a bare input, as a chat does.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from typing import Any

from agentplatform.v1.shapes.base import BadRequest
from agentplatform.v1.shapes.chat import (
    MAX_CONVERSATION_CHARS,
    ChatCompletionRequest,
    ChatImagePart,
    ChatImageUrl,
    ChatNamedTool,
    ChatResponseFormat,
    ChatSampling,
    ChatTool,
)
from agents.runtime.client_request import ClientRequest, ClientTool, Sampling
from providers.runtime.images import MAX_IMAGES, ImageRefused, check_total, image_from_data_url
from providers.runtime.types import (
    AssistantMessage,
    Image,
    Message,
    ToolResultMessage,
    UserMessage,
)
from tools.runtime.tool import ToolCall

MAX_SCHEMA_CHARS = 200_000  # all tool parameters and the output schema of one request
IMAGE_PARTS = typing.get_args(ChatImagePart.model_fields["type"].annotation)
NO_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    input: str  # the last user message's text: what the run records as its input
    stream: bool
    include_usage: bool = False
    client: ClientRequest | None = None  # None: a plain request (one user message)

    @property
    def fetches_images(self) -> bool:
        return self.client is not None and any(i.url for i in self.client.images)

    @property
    def structured(self) -> bool:
        return self.client is not None and self.client.output_schema is not None


def json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError):
        raise BadRequest("The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


def parse_chat_body(body: dict[str, Any], query_stream: bool = False) -> ChatRequest:
    """A Chat Completions body (also what the Responses and Messages faces translate their
    bodies into)."""
    _check_schema_sizes(body)  # (before the shape checks the schemas)
    request = ChatCompletionRequest.checked(body)
    options = request.stream_options
    include_usage = bool(options is not None and options.include_usage)
    instructions, turns = _turns(request.messages)
    tools = _tools(request.tools)
    tool_choice = _tool_choice(request.tool_choice, tools)
    output_schema = _output_schema(request.response_format)
    if output_schema is not None and tool_choice == "none":
        raise BadRequest(
            '`tool_choice` "none" cannot be kept with a `response_format`: the structured '
            "answer is given through a tool.",
            "tool_choice",
        )
    client = ClientRequest(
        messages=tuple(turns),
        instructions=instructions,
        tools=tools,
        tool_choice=tool_choice,
        output_schema=output_schema,
        sampling=_sampling(request),
        end_user=request.user or "",
    )
    try:
        check_total(client.images)
    except ImageRefused as exc:
        raise BadRequest(str(exc), "messages") from None
    text = client.last_user_text
    if not text.strip():
        raise BadRequest("The last user message is empty.", "messages")
    plain = len(turns) == 1 and not client.images and client == ClientRequest(client.messages)
    return ChatRequest(
        model=request.model,
        input=text,
        stream=bool(request.stream) or query_stream,
        include_usage=include_usage,
        client=None if plain else client,
    )


# -- messages ------------------------------------------------------------------------------
def _turns(messages: list[Any]) -> tuple[str, list[Message]]:
    """The system/developer text, and the other messages as turns (from the first user
    message on, up to the last user or tool message: a trailing assistant prefill is not
    used). One pass; a message's role is read as its string (cheaper than asking the
    shapes' classes)."""
    system: list[str] = []
    turns: list[Message] = []
    calls: dict[str, str] = {}  # call id -> tool name, for the results that answer them
    unanswered: dict[str, int] = {}  # call id -> the message index that made it
    total = image_count = 0
    users = 0  # user turns so far
    for index, message in enumerate(messages):
        role = message.role
        text, images = _content_of(message.content, index)
        if images:
            image_count += len(images)
            if image_count > MAX_IMAGES:
                raise BadRequest(
                    f"At most {MAX_IMAGES} images per request.", f"messages[{index}].content"
                )
        total += len(text)
        if total > MAX_CONVERSATION_CHARS:
            raise BadRequest(
                f"The messages exceed {MAX_CONVERSATION_CHARS} characters.", f"messages[{index}]"
            )
        if unanswered and role != "tool":
            call_id, at = next(iter(unanswered.items()))
            raise BadRequest(
                f"The tool call `{call_id}` of messages[{at}] has no `tool` message with its "
                "result before the next message.",
                f"messages[{index}]",
            )
        if role == "user":
            users += 1
            turns.append(UserMessage(text, images))
        elif role == "assistant":
            if not users:
                continue  # providers want a user turn first
            made = tuple(
                ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or {})
                for c in message.tool_calls or ()
            )
            for call in made:
                if call.id in calls:
                    raise BadRequest(
                        f"Two tool calls have the id `{call.id}`.", f"messages[{index}]"
                    )
                calls[call.id] = call.name
                unanswered[call.id] = index
            if text or made:
                turns.append(AssistantMessage(text=text, tool_calls=made))
        elif role == "tool":
            call_id = message.tool_call_id
            if call_id in calls and call_id not in unanswered:
                raise BadRequest(
                    f"The tool call `{call_id}` was answered already.", f"messages[{index}]"
                )
            if call_id not in calls:
                raise BadRequest(
                    "A `tool` message needs the `tool_call_id` of a call an earlier assistant "
                    "message made.",
                    f"messages[{index}].tool_call_id",
                )
            del unanswered[call_id]
            turns.append(ToolResultMessage(call_id=call_id, name=calls[call_id], content=text))
        elif text.strip():  # system, developer
            system.append(text.strip())
    while turns and isinstance(turns[-1], AssistantMessage) and not turns[-1].tool_calls:
        turns.pop()
    if unanswered:
        call_id, at = next(iter(unanswered.items()))
        raise BadRequest(
            f"The tool call `{call_id}` of messages[{at}] has no `tool` message with its result.",
            "messages",
        )
    if not users:
        raise BadRequest("Send at least one user message.", "messages")
    return "\n\n".join(system), turns


def _content_of(content: str | list[Any] | None, index: int) -> tuple[str, tuple[Image, ...]]:
    """A message's text (a string, or its text parts joined) and its image parts (a user
    message's: the shape takes them nowhere else)."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    texts: list[str] = []
    images: list[Image] = []
    for at, part in enumerate(content):
        if part.type in IMAGE_PARTS:
            images.append(_image(part, f"messages[{index}].content[{at}]"))
        else:
            texts.append(part.text)
    return "\n".join(texts), tuple(images)


def _image(part: ChatImagePart, param: str) -> Image:
    """An image part: a data URL's image (checked now), or an http(s) URL's (fetched
    through the guarded egress once the caller's key is checked, providers.images)."""
    url = part.image_url.url if isinstance(part.image_url, ChatImageUrl) else part.image_url
    if not url.startswith("data:"):
        return Image(media_type="", data="", url=url)
    try:
        return image_from_data_url(url)
    except ImageRefused as exc:
        raise BadRequest(str(exc), param) from None


# -- tools, output format, sampling ----------------------------------------------------------
def _tools(raw: list[ChatTool] | None) -> tuple[ClientTool, ...]:
    tools: dict[str, ClientTool] = {}
    for index, tool in enumerate(raw or ()):
        function = tool.function
        if function.name in tools:
            raise BadRequest(
                f"Two tools are named `{function.name}`.", f"tools[{index}].function.name"
            )
        tools[function.name] = ClientTool(
            name=function.name,
            description=function.description or "",
            parameters=NO_PARAMETERS if function.parameters is None else function.parameters,
        )
    return tuple(tools.values())


def _check_schema_sizes(body: dict[str, Any]) -> None:
    """Before any schema is checked (that costs time in proportion to its size)."""
    schemas = [body.get("tools"), body.get("response_format")]
    try:
        size = sum(len(json.dumps(s)) for s in schemas if s is not None)
    except (TypeError, ValueError, RecursionError):
        raise BadRequest("The tools or response_format cannot be read.", "tools") from None
    if size > MAX_SCHEMA_CHARS:
        raise BadRequest(
            f"The tools and response_format together exceed {MAX_SCHEMA_CHARS} characters.",
            "tools",
        )


def _tool_choice(raw: str | ChatNamedTool | None, tools: tuple[ClientTool, ...]) -> str:
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        return raw
    name = raw.function.name
    if name not in {t.name for t in tools}:
        raise BadRequest(f"`tool_choice` names `{name}`, which is not in `tools`.", "tool_choice")
    return name


def _output_schema(raw: ChatResponseFormat | None) -> dict[str, Any] | None:
    if raw is None or raw.type == "text":
        return None
    if raw.type == "json_object":
        return {"type": "object"}
    return raw.json_schema.schema_  # type: ignore[union-attr]  # (the shape requires it)


def check_sampling(body: dict[str, Any]) -> None:
    """The sampling fields (`temperature`, `top_p`, the token limits, `stop`, `seed`) as a
    chat completion takes them: a 400 naming the one that is wrong."""
    _sampling(ChatSampling.checked(body))


def _sampling(request: ChatSampling) -> Sampling:
    limits = [n for n in (request.max_completion_tokens, request.max_tokens) if n is not None]
    stop = request.stop
    stops: tuple[str, ...] = (stop,) if isinstance(stop, str) else tuple(stop or ())
    for item in stops:
        check_text(item, "stop")
    return Sampling(
        temperature=None if request.temperature is None else float(request.temperature),
        top_p=None if request.top_p is None else float(request.top_p),
        max_tokens=min(limits) if limits else None,
        stop=stops,
        seed=request.seed,
    )


# -- small checks ------------------------------------------------------------------------------
def check_text(text: str, param: str) -> None:
    """Text that can be stored: no NUL, no lone surrogate (JSON "\\ud800")."""
    if "\x00" in text:
        raise BadRequest("Text may not contain NUL characters.", param)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("Text must be valid Unicode.", param) from None
