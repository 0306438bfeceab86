"""A Chat Completions request body, checked and turned into what a run takes.

Every field a client may send is checked here and a bad one is a 400 naming it (OpenAI's
`param`); nothing a caller writes reaches a library unchecked (tool parameter and
response_format schemas go through tools.runtime.validation's guarded check). The
messages become structured turns (agents.runtime.client_request): system and developer
messages join the agent's instructions, assistant tool calls and tool results stay what
they are, so the model sees the conversation the caller had. A plain request (one user
message, no options) needs none of it: it runs as a bare input, as a chat does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentplatform.v1.shapes.base import BadRequest
from agentplatform.v1.shapes.chat import (
    MAX_CONVERSATION_CHARS,
    ROLES,
    ChatCompletionRequest,
    ChatSampling,
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
from tools.runtime.tool import NAME_PATTERN, ToolCall
from tools.runtime.validation import SchemaError, check_schema

LEGACY_ROLES = ("function",)  # known, refused with a word on what to send instead
MAX_SCHEMA_CHARS = 200_000  # all tool parameters and the output schema of one request


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
    """A Chat Completions body (also what the Responses face translates its body into)."""
    request = ChatCompletionRequest.checked(body)
    model = request.model
    check_text(model, "model")
    options = request.stream_options
    include_usage = bool(options is not None and options.include_usage)
    messages = request.messages
    _check_schema_sizes(body)
    instructions, turns = _turns(messages)
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
        end_user=_end_user(request.user),
    )
    _check_nested(client.to_dict(), "messages")
    try:
        check_total(client.images)
    except ImageRefused as exc:
        raise BadRequest(str(exc), "messages") from None
    text = client.last_user_text
    if not text.strip():
        raise BadRequest("The last user message is empty.", "messages")
    plain = len(turns) == 1 and not client.images and client == ClientRequest(client.messages)
    return ChatRequest(
        model=model,
        input=text,
        stream=bool(request.stream) or query_stream,
        include_usage=include_usage,
        client=None if plain else client,
    )


# -- messages ------------------------------------------------------------------------------
def _turns(messages: list[Any]) -> tuple[str, list[Message]]:
    """The system/developer text, and the other messages as turns (from the first user
    message on, up to the last user or tool message: a trailing assistant prefill is not
    used)."""
    system: list[str] = []
    turns: list[Message] = []
    calls: dict[str, str] = {}  # call id -> tool name, for the results that answer them
    unanswered: dict[str, int] = {}  # call id -> the message index that made it
    total = image_count = 0
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in ROLES + LEGACY_ROLES:  # (a list: unhashable)
            raise BadRequest(
                f"Each message needs a role: one of {', '.join(sorted(ROLES + LEGACY_ROLES))}.",
                f"{param}.role",
            )
        text, images = _content_of(message.get("content"), f"{param}.content", role == "user")
        image_count += len(images)
        if image_count > MAX_IMAGES:
            raise BadRequest(f"At most {MAX_IMAGES} images per request.", f"{param}.content")
        total += len(text)
        if total > MAX_CONVERSATION_CHARS:
            raise BadRequest(f"The messages exceed {MAX_CONVERSATION_CHARS} characters.", param)
        if role != "tool" and unanswered:
            call_id, at = next(iter(unanswered.items()))
            raise BadRequest(
                f"The tool call `{call_id}` of messages[{at}] has no `tool` message with its "
                "result before the next message.",
                param,
            )
        if role in ("system", "developer"):
            if text.strip():
                system.append(text.strip())
        elif role == "user":
            turns.append(UserMessage(text, images))
        elif role == "assistant":
            if not any(isinstance(t, UserMessage) for t in turns):
                continue  # providers want a user turn first
            made = _tool_calls(message.get("tool_calls"), f"{param}.tool_calls")
            for call in made:
                if call.id in calls:
                    raise BadRequest(f"Two tool calls have the id `{call.id}`.", param)
                calls[call.id] = call.name
                unanswered[call.id] = index
            if text or made:
                turns.append(AssistantMessage(text=text, tool_calls=made))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id in calls and call_id not in unanswered:
                raise BadRequest(f"The tool call `{call_id}` was answered already.", param)
            if not isinstance(call_id, str) or call_id not in calls:
                raise BadRequest(
                    "A `tool` message needs the `tool_call_id` of a call an earlier assistant "
                    "message made.",
                    f"{param}.tool_call_id",
                )
            unanswered.pop(call_id, None)
            turns.append(ToolResultMessage(call_id=call_id, name=calls[call_id], content=text))
        else:
            raise BadRequest(
                "The legacy `function` role is not supported: send `tool` messages.",
                f"{param}.role",
            )
    while turns and isinstance(turns[-1], AssistantMessage) and not turns[-1].tool_calls:
        turns.pop()
    if unanswered:
        call_id, at = next(iter(unanswered.items()))
        raise BadRequest(
            f"The tool call `{call_id}` of messages[{at}] has no `tool` message with its result.",
            "messages",
        )
    if not any(isinstance(t, UserMessage) for t in turns):
        raise BadRequest("Send at least one user message.", "messages")
    return "\n\n".join(system), turns


def _content_of(content: Any, param: str, images: bool) -> tuple[str, tuple[Image, ...]]:
    """A message's text (a string, or its text parts joined) and, where `images` may come
    (user messages), its image parts."""
    found: list[Image] = []
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("image_url", "input_image") and images:
                found.append(_image(part, param))
                continue
            if kind not in ("text", "input_text", "output_text"):
                raise BadRequest(
                    f"Content parts of type {kind!r} are not supported here; send text"
                    + (" or image_url parts." if images else " parts."),
                    param,
                )
            if not isinstance(part.get("text"), str):
                raise BadRequest("A text part needs a `text` string.", param)
            texts.append(part["text"])
        text = "\n".join(texts)
    else:
        raise BadRequest("`content` must be a string or a list of parts.", param)
    check_text(text, param)
    return text, tuple(found)


def image_of_url(url: Any, param: str) -> Image:
    """An image part's URL: a data URL (checked now) or an http(s) URL (fetched through the
    guarded egress once the caller's key is checked, providers.images)."""
    if not isinstance(url, str) or not url:
        raise BadRequest("An image part needs its `url`.", param)
    if url.startswith("data:"):
        try:
            return image_from_data_url(url)
        except ImageRefused as exc:
            raise BadRequest(str(exc), param) from None
    if not url.startswith(("https://", "http://")) or len(url) > 2048:
        raise BadRequest("An image URL must be a data URL or an http(s) URL.", param)
    check_text(url, param)
    return Image(media_type="", data="", url=url)


def _image(part: dict[str, Any], param: str) -> Image:
    raw = part.get("image_url")
    return image_of_url(raw.get("url") if isinstance(raw, dict) else raw, param)


def _tool_calls(raw: Any, param: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest("`tool_calls` must be a list.", param)
    calls = []
    for index, item in enumerate(raw):
        where = f"{param}[{index}]"
        function = item.get("function") if isinstance(item, dict) else None
        call_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(call_id, str) or not call_id:
            raise BadRequest("A tool call needs an `id` and a `function`.", where)
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise BadRequest("A tool call's `function.name` must be a tool name.", where)
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except (ValueError, RecursionError):
            parsed = None
        if arguments is not None and not isinstance(arguments, str):
            parsed = None
        if not isinstance(parsed, dict):
            raise BadRequest(
                "A tool call's `function.arguments` must be a JSON object as a string.",
                f"{where}.function.arguments",
            )
        check_text(call_id, f"{where}.id")
        calls.append(ToolCall(id=call_id, name=name, arguments=parsed))
    return tuple(calls)


# -- tools, output format, sampling ----------------------------------------------------------
def _tools(raw: list[Any] | None) -> tuple[ClientTool, ...]:
    if raw is None:
        return ()
    tools: dict[str, ClientTool] = {}
    for index, item in enumerate(raw):
        param = f"tools[{index}]"
        function = item.get("function") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or item.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise BadRequest('Each tool must be {"type": "function", "function": {...}}.', param)
        name = function.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise BadRequest(
                "A tool's `name` must be 1-64 letters, digits, `_` or `-`.",
                f"{param}.function.name",
            )
        if name in tools:
            raise BadRequest(f"Two tools are named `{name}`.", f"{param}.function.name")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise BadRequest("A tool's `description` must be a string.", f"{param}.function")
        check_text(description, f"{param}.function.description")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        tools[name] = ClientTool(
            name=name,
            description=description,
            parameters=_object_schema(parameters, f"{param}.function.parameters"),
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


def _check_nested(value: Any, param: str, depth: int = 0) -> None:
    """Every string anywhere in what will be stored (tool arguments, schemas...)."""
    if depth > 64:
        raise BadRequest("The request nests too deeply.", param)
    if isinstance(value, str):
        check_text(value, param)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(str(key), param)
            _check_nested(item, param, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_nested(item, param, depth + 1)


def _object_schema(schema: Any, param: str) -> dict[str, Any]:
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise BadRequest("The schema must be a JSON Schema object with `type` object.", param)
    try:
        check_schema(schema)
    except SchemaError as exc:
        raise BadRequest(f"The schema is not usable: {exc}", param) from None
    return schema


def _tool_choice(raw: Any, tools: tuple[ClientTool, ...]) -> str:
    if raw is None:
        return "auto"
    if raw in ("auto", "none", "required"):
        return raw
    name = None
    if isinstance(raw, dict) and raw.get("type") == "function":
        function = raw.get("function")
        name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise BadRequest(
            '`tool_choice` must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            "tool_choice",
        )
    if name not in {t.name for t in tools}:
        raise BadRequest(f"`tool_choice` names `{name}`, which is not in `tools`.", "tool_choice")
    return name


def _output_schema(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = raw.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return _object_schema(schema, "response_format.json_schema.schema")
    raise BadRequest(
        '`response_format` must be {"type": "text"}, {"type": "json_object"} or '
        '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}.',
        "response_format",
    )


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


def _end_user(raw: str | None) -> str:
    if raw is None:
        return ""
    check_text(raw, "user")
    return raw


# -- small checks ------------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_text(text: str, param: str) -> None:
    """Text that can be stored: no NUL, no lone surrogate (JSON "\\ud800")."""
    if "\x00" in text:
        raise BadRequest("Text may not contain NUL characters.", param)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("Text must be valid Unicode.", param) from None
