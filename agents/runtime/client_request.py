"""What an API caller sends with one run beside the agent's own configuration.

The OpenAI- and Anthropic-compatible faces translate their wire formats into a
`ClientRequest`: the conversation as structured turns (ending with a user message or the
results of the caller's own tools), instructions to add to the agent's, tools the caller
runs itself, a forced tool choice for the first round, an output schema, and sampling
options. It is stored with the run (JSON, `to_dict`/`from_dict`), so any worker executes
the run exactly as asked, and `apply` turns it into the spec the loop runs with.

A call to a client tool ends the run awaiting the client (RunStatus.AWAITING_CLIENT); the
caller's next request, carrying the results, is a new run (stateless, as OpenAI's API is).

The caller's tools keep their names (its own prompts name them, and its calls come back
under them). When one takes the name of a tool the platform adds to every such run (the
structured output's `final_answer`, the memory tools), the platform's gives way: the model
sees it as `final_answer_2` (`platform_name`), and the run's prompt names it so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from agents.runtime.memory import MEMORY_TOOL_NAMES
from agents.runtime.spec import AgentSpec
from agents.runtime.state import message_from_dict, message_to_dict
from agents.runtime.structured import FINAL_ANSWER
from providers.runtime.types import AssistantMessage, Image, Message, UserMessage
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed

CLIENT_TAG = "client"
MAX_RESPONSE_TOKENS = 32768  # a caller's max_tokens above the agent's own limit is capped
SYNTHETIC_TOOLS = (FINAL_ANSWER, *MEMORY_TOOL_NAMES)  # the platform's, whatever the agent


def platform_name(name: str, client_tools: Iterable[Any]) -> str:
    """The name the model sees for the platform's synthetic tool `name` beside the caller's
    tools (a spec's `client_tools` or a request's `tools`): its own, or when one of the
    caller's has it, the first of `name_2`, `name_3`, ... that none of the caller's has."""
    taken = {item.name for item in client_tools}
    if name not in taken:
        return name
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


@dataclass(frozen=True)
class ClientTool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})

    def as_tool(self) -> Tool:
        """A Tool the model is offered; the loop never runs it (the caller does)."""
        return Tool(
            name=self.name,
            description=self.description.strip() or f"The caller's tool `{self.name}`.",
            input_schema=self.parameters,
            handler=_runs_at_the_client,
            tags=frozenset({CLIENT_TAG}),
            capability=Capability(effect=Effect.NONE),
            validate=_any_arguments,  # the caller checks its own tool's arguments
        )


def _runs_at_the_client(arguments: dict[str, Any], ctx: Any) -> None:
    raise ToolFailed("this tool runs at the caller, not on the platform")


def _any_arguments(arguments: Any) -> None:
    return None


@dataclass(frozen=True)
class Sampling:
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class ClientRequest:
    messages: tuple[Message, ...]  # the whole conversation the caller sent
    instructions: str = ""  # its system/developer messages, added to the agent's
    tools: tuple[ClientTool, ...] = ()
    tool_choice: str = "auto"  # "auto" | "none" | "required" | a tool's name
    output_schema: dict[str, Any] | None = None
    sampling: Sampling = field(default_factory=Sampling)
    end_user: str = ""  # the caller's id for its own user (OpenAI `user`), recorded only
    kept: bool = True  # False: the caller may not read or continue it by id (`store`)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"messages": [message_to_dict(m) for m in self.messages]}
        if self.instructions:
            data["instructions"] = self.instructions
        if self.tools:
            data["tools"] = [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in self.tools
            ]
        if self.tool_choice != "auto":
            data["tool_choice"] = self.tool_choice
        if self.output_schema is not None:
            data["output_schema"] = self.output_schema
        sampling = {k: v for k, v in vars(self.sampling).items() if v not in (None, ())}
        if sampling:
            data["sampling"] = sampling
        if self.end_user:
            data["end_user"] = self.end_user
        if not self.kept:
            data["kept"] = False
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientRequest:
        sampling = dict(data.get("sampling") or {})
        sampling["stop"] = tuple(sampling.get("stop") or ())
        return cls(
            messages=tuple(message_from_dict(m) for m in data.get("messages", [])),
            instructions=data.get("instructions", ""),
            tools=tuple(ClientTool(**t) for t in data.get("tools", [])),
            tool_choice=data.get("tool_choice", "auto"),
            output_schema=data.get("output_schema"),
            sampling=Sampling(**sampling),
            end_user=data.get("end_user", ""),
            kept=data.get("kept", True),
        )

    def apply(self, spec: AgentSpec) -> AgentSpec:
        """The spec one run of this request runs with."""
        instructions = spec.instructions
        if self.instructions:
            instructions = (
                f"{instructions}\n\n{self.instructions}" if instructions else self.instructions
            )
        sampling = self.sampling
        max_tokens = spec.max_tokens_per_response
        if sampling.max_tokens is not None:
            max_tokens = min(sampling.max_tokens, spec.max_tokens_per_run or MAX_RESPONSE_TOKENS)
        return replace(
            spec,
            instructions=instructions,
            temperature=spec.temperature if sampling.temperature is None else sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
            stop=sampling.stop,
            max_tokens_per_response=max_tokens,
            tool_choice=self.tool_choice,
            client_tools=tuple(t.as_tool() for t in self.tools),
            output_schema=self.output_schema
            if self.output_schema is not None
            else spec.output_schema,
        )

    @property
    def images(self) -> list[Image]:
        return [i for m in self.messages if isinstance(m, UserMessage) for i in m.images]

    async def with_images_fetched(self, fetch: Callable[[str], Awaitable[Image]]) -> ClientRequest:
        """This request with every image given by URL replaced by `fetch(url)`'s image."""
        if not any(i.url for i in self.images):
            return self
        messages = []
        for message in self.messages:
            if isinstance(message, UserMessage) and any(i.url for i in message.images):
                images = [await fetch(i.url) if i.url else i for i in message.images]
                message = replace(message, images=tuple(images))
            messages.append(message)
        return replace(self, messages=tuple(messages))

    @property
    def takes_text_only(self) -> bool:
        """Nothing but turns of text and instructions (what a crew's task can hold)."""
        return (
            not self.tools
            and self.output_schema is None
            and not self.images
            and all(
                isinstance(m, UserMessage | AssistantMessage) and not getattr(m, "tool_calls", ())
                for m in self.messages
            )
        )

    def transcript(self, limit: int) -> str:
        """The conversation as one text (a crew's task is text): the last user message,
        with the instructions and turns before it as a transcript, cut from the oldest to
        fit `limit` characters."""
        prompt = self.last_user_text
        lines = [f"system: {self.instructions}"] if self.instructions else []
        lines += [f"{turn.role}: {turn.text.strip()}" for turn in self.text_turns()]
        head, tail = "Earlier in this conversation:\n", "\n\nThe latest message, to answer now:\n"
        budget = limit - len(prompt) - len(head) - len(tail) - 40
        kept: list[str] = []
        for line in reversed(lines):
            if len(line) + 1 > budget:
                kept.append("(earlier messages omitted)")
                break
            kept.append(line)
            budget -= len(line) + 1
        if kept in ([], ["(earlier messages omitted)"]):
            return prompt
        return head + "\n".join(reversed(kept)) + tail + prompt

    def text_turns(self) -> list[UserMessage | AssistantMessage]:
        """The text of the turns before the last user message (tool calls left out)."""
        last = max(i for i, m in enumerate(self.messages) if isinstance(m, UserMessage))
        return [
            UserMessage(m.text) if isinstance(m, UserMessage) else AssistantMessage(m.text)
            for m in self.messages[:last]
            if isinstance(m, UserMessage | AssistantMessage) and m.text.strip()
        ]

    @property
    def last_user_text(self) -> str:
        """What the run records as its input: the text of the last user message."""
        for message in reversed(self.messages):
            if isinstance(message, UserMessage):
                return message.text
        return ""
