"""A run with many tools is offered a few each round (docs/tools.md, "Routing").

When the agent's tools outnumber `ToolRouting.threshold`, each model request carries:

- the tools that always stay: the synthetic ones (final_answer, memory, crew delegation,
  the API caller's own), those tagged `pinned`, and those the caller pins (an agent's
  knowledge tool);
- the `top_k` best of the index (tools/runtime/routing.py) for the conversation's latest
  user message, or, with a `selection_model`, those a small model picks from a longer
  shortlist of them;
- the tools the run has called, or found with `search_tools`;
- `search_tools` itself: the model asks for other tools by what they do.

What a round offers follows from the run's messages (and the index), never from state
of its own, so a run resumed after a crash or an approval offers what it would have.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.runtime.client_request import CLIENT_TAG
from agents.runtime.memory import MEMORY_TOOL_NAMES
from agents.runtime.structured import FINAL_ANSWER
from providers.runtime.types import AssistantMessage, Message, ToolResultMessage, UserMessage
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.routing import (
    FUSION_MIX,
    Choose,
    TextEmbedder,
    ToolIndex,
    select_with_model,
)
from tools.runtime.tool import Capability, Effect, Tool

SEARCH_TOOLS = "search_tools"
PINNED_TAG = "pinned"
_ALWAYS_TAGS = frozenset({PINNED_TAG, "synthetic", CLIENT_TAG})
SEARCH_RESULTS = 5  # tools one search_tools call returns
SHORTLIST_FACTOR = 3  # with a selection model: it picks top_k of top_k * this


@dataclass(frozen=True)
class ToolRouting:
    """How a run with many tools is offered few: given by the caller (the platform reads
    TOOL_ROUTING_* settings). `index` covers the agent's routable tools (it may hold more:
    only the agent's are ranked); `embedder` gives the request's vector when the index has
    the cards' vectors (None: lexical ranking alone)."""

    index: ToolIndex
    threshold: int = 30
    top_k: int = 10
    pinned: frozenset[str] = frozenset()
    embedder: TextEmbedder | None = None
    selection_model: str = ""  # a small model of the run's connection picks; "" = none
    fusion: str = FUSION_MIX


@dataclass
class OfferedTools:
    tools: list[Tool]
    routed: list[str]  # the ranking's (or the selection model's) picks for the request
    found: list[str] = field(default_factory=list)  # called or found by search_tools before


class RoundTools:
    """One run's choice of tools per round. With routing inactive (no routing, or not
    more tools than the threshold) every round offers every tool, as without it."""

    def __init__(
        self,
        routing: ToolRouting | None,
        tools: ToolRegistry,
        *,
        client_tools: Iterable[str] = (),
        forced: str = "",
        synthetic: Iterable[str] = (FINAL_ANSWER, *MEMORY_TOOL_NAMES),
    ) -> None:
        self.routing = routing
        self.tools = tools
        self.active = routing is not None and len(tools) > routing.threshold
        self._choose: Choose | None = None
        self._routed: dict[str, list[str]] = {}  # request text -> its picks, for this run
        self._vectors: dict[str, list[float]] = {}
        self.degraded = ""  # why a ranking was lexical though vectors were meant to help
        self.always: set[str] = set()  # offered every round
        self.routable: list[str] = []  # the ranking's candidates
        if not self.active:
            return
        assert routing is not None
        self.always = {
            item.name
            for item in tools
            if item.tags & _ALWAYS_TAGS
            or item.name in routing.pinned
            or item.name in (*synthetic, *client_tools, forced)
        }
        self.routable = [name for name in tools.names() if name not in self.always]
        if not tools.has(SEARCH_TOOLS):  # (a tenant's tool cannot take the name: reserved)
            tools.register(self._search_tool())
        self.always.add(SEARCH_TOOLS)

    def use_model(self, choose: Choose) -> None:
        """The selection step's model call (the loop makes it with the run's adapter)."""
        self._choose = choose

    async def offered(self, messages: Sequence[Message]) -> OfferedTools:
        if not self.active:
            return OfferedTools(tools=list(self.tools), routed=[])
        request = _latest_request(messages)
        routed = await self._route(request) if request.strip() else []
        found = [name for name in _found(messages) if self.tools.has(name)]
        chosen = self.always | set(routed) | set(found)
        return OfferedTools(
            tools=[item for item in self.tools if item.name in chosen], routed=routed, found=found
        )

    async def _route(self, request: str) -> list[str]:
        if request in self._routed:
            return self._routed[request]
        routing = self.routing
        assert routing is not None
        depth = routing.top_k * (SHORTLIST_FACTOR if self._choose else 1)
        hits = routing.index.search(
            request,
            k=depth,
            query_vector=await self._vector(request),
            among=self.routable,
            fusion=routing.fusion,
        )
        names = [hit.name for hit in hits]
        if self._choose is not None and names:
            cards = [card for name in names if (card := routing.index.card(name)) is not None]
            names = await select_with_model(request, cards, self._choose, limit=routing.top_k)
        self._routed[request] = names
        return names

    async def _vector(self, text: str) -> list[float] | None:
        embedder = self.routing.embedder if self.routing else None
        if embedder is None or self.routing.index.semantic is None:  # type: ignore[union-attr]
            return None
        if text not in self._vectors:
            try:
                self._vectors[text] = (await embedder.embed([text]))[0]
            except Exception as exc:  # any embedder's failure: rank lexically, and say so
                self.degraded = f"lexical ranking only: the embedder failed ({exc})"[:300]
                return None
        return self._vectors[text]

    def _search_tool(self) -> Tool:
        async def search_tools(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
            query = arguments["query"]
            routing = self.routing
            assert routing is not None
            hits = routing.index.search(
                query,
                k=SEARCH_RESULTS,
                query_vector=await self._vector(query),
                among=self.routable,
                fusion=routing.fusion,
            )
            tools = [
                {"name": hit.name, "description": self.tools.get(hit.name).description}
                for hit in hits
            ]
            if not tools:
                return {"tools": [], "note": "No tool matches; describe the task in other words."}
            return {"tools": tools, "note": "These tools can be called from now on."}

        return Tool(
            name=SEARCH_TOOLS,
            description=(
                "Find more of your tools by what they do. You are offered only the tools "
                "that seem to fit the request; when you need another, describe the task in "
                "a few words (e.g. 'refund a card payment'). The tools found can be called "
                "from the next step on."
            ),
            input_schema={
                "type": "object",
                "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500}},
                "required": ["query"],
                "additionalProperties": False,
            },
            handler=search_tools,
            tags=frozenset({"synthetic", "routing"}),
            capability=Capability(effect=Effect.NONE, idempotent=True, timeout_s=30),
        )


def _latest_request(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            return message.text
    return ""


def _found(messages: Sequence[Message]) -> list[str]:
    """Tools the run called, and those search_tools returned, in order of appearance."""
    names: dict[str, None] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            names.update((call.name, None) for call in message.tool_calls)
        elif (
            isinstance(message, ToolResultMessage)
            and message.name == SEARCH_TOOLS
            and not message.is_error
        ):
            try:
                listed = json.loads(message.content).get("tools", [])
                names.update((item["name"], None) for item in listed)
            except (ValueError, AttributeError, TypeError, KeyError):
                continue  # not our result's shape: nothing found there
    names.pop(SEARCH_TOOLS, None)
    return list(names)
