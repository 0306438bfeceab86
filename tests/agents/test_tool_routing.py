"""Tool routing in the agent loop (agents/runtime/tool_routing.py, agents/runtime/loop.py),
driven by FakeModel over tools of the labelled set: no network, no database."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from agents.memory import DjangoFactStore, MemorySettings
from agents.runtime.client_request import ClientTool
from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, Decision, RunStatus
from agents.runtime.state import RunState
from agents.runtime.tool_routing import SEARCH_TOOLS, ToolRouting
from providers.runtime.errors import RateLimited
from providers.runtime.fake import FakeModel
from providers.runtime.types import ModelResponse, ToolResultMessage, Usage
from tests.agents.test_loop import CTX, RecordingSink, SavingCheckpointer
from tests.tools.routing_data import as_tool, labelled_tools
from tools.runtime.registry import ToolRegistry
from tools.runtime.reserved import PLATFORM_TOOL_NAMES
from tools.runtime.routing import ToolCard, ToolIndex
from tools.runtime.tool import Capability, Effect, ToolCall

WEATHER = "what is the weather forecast for this weekend? will I need an umbrella?"


def many_tools(count: int = 60, *extra) -> ToolRegistry:
    """`count` tools of the labelled set (the weather and shipping ones among them)."""
    tools = list(labelled_tools()[:count])
    return ToolRegistry([*tools, *extra])


def routing_for(registry: ToolRegistry, **overrides: Any) -> ToolRouting:
    index = ToolIndex([ToolCard.of(item) for item in registry])
    return ToolRouting(index=index, **{"threshold": 30, "top_k": 5, **overrides})


def spec(**overrides: Any) -> AgentSpec:
    return AgentSpec(name="router", instructions="Help.", model="big-model", **overrides)


def run(model, registry, routing, *, input=WEATHER, state=None, **kwargs):
    sink = kwargs.pop("sink", RecordingSink())
    outcome = asyncio.run(
        run_agent(
            spec=kwargs.pop("spec", spec()),
            adapter=model,
            registry=registry,
            ctx=CTX,
            input=input,
            state=state,
            sink=sink,
            routing=routing,
            **kwargs,
        )
    )
    return outcome, sink


def offered(request) -> list[str]:
    return [item.name for item in request.tools]


def test_an_agent_within_the_threshold_is_offered_every_tool_and_no_event():
    registry = many_tools(30)
    model = FakeModel(["sunny"])
    outcome, sink = run(model, registry, routing_for(registry, threshold=30))
    assert outcome.status is RunStatus.SUCCEEDED
    assert offered(model.requests[0]) == registry.names()
    assert sink.of("tools.offered") == []
    assert "search_tools" not in model.requests[0].system


def test_over_the_threshold_a_round_offers_the_top_k_plus_pinned_and_synthetic_tools():
    pinned = replace(as_tool(_card("office_wifi_password", "Tell the office Wi-Fi password")),
                     tags=frozenset({"pinned"}))  # fmt: skip
    registry = many_tools(60, pinned)
    model = FakeModel([ToolCall("c1", "final_answer", {"answer": "yes"})])
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    outcome, sink = run(
        model, registry, routing_for(registry), spec=spec(output_schema=schema),
        input="What is the weather forecast for Lisbon, and are there storm warnings?",
        context_blocks=[("Account", "Plan: pro")],
    )  # fmt: skip
    assert outcome.status is RunStatus.SUCCEEDED
    names = offered(model.requests[0])
    (event,) = sink.of("tools.offered")
    assert event["round"] == 1 and event["tools"] == names and event["of"] == 62
    assert len(event["routed"]) == 5
    assert {"get_weather_forecast", "get_severe_weather_alerts"} <= set(event["routed"])
    # The top 5, then what always stays.
    assert set(names) == {*event["routed"], "final_answer", SEARCH_TOOLS, "office_wifi_password"}
    # The prompt's guide lists what always stays, and says there is more.
    system = model.requests[0].system
    assert "search_tools" in system and "get_marine_forecast" not in system
    assert "You have more tools than those listed" in system
    assert "## Account\nPlan: pro" in system


def test_search_tools_finds_tools_that_later_rounds_offer_and_the_events_show_it():
    registry = many_tools(60)
    model = FakeModel([
        ToolCall("c1", SEARCH_TOOLS, {"query": "where is my parcel, tracking number"}),
        ToolCall("c2", "track_shipment", {"tracking_number": "1Z9"}),
        "It arrives tomorrow.",
    ])  # fmt: skip
    outcome, sink = run(model, registry, routing_for(registry), input="Is it raining in Oslo?")
    assert outcome.status is RunStatus.SUCCEEDED
    first, second, third = (offered(r) for r in model.requests)
    assert "track_shipment" not in first
    assert "track_shipment" in second and "track_shipment" in third
    found = json.loads(model.requests[1].messages[-1].content)
    assert "track_shipment" in [item["name"] for item in found["tools"]]
    events = sink.of("tools.offered")
    assert [e["round"] for e in events] == [1, 2, 3]
    assert [e["tools"] for e in events] == [first, second, third]
    assert "track_shipment" in events[1]["found"]
    result = [m for m in model.requests[2].messages if isinstance(m, ToolResultMessage)][-1]
    assert json.loads(result.content) == {"tool": "track_shipment", "tracking_number": "1Z9"}


def test_a_resumed_run_offers_what_the_interrupted_one_found():
    registry = many_tools(60)
    checkpoint = SavingCheckpointer()
    model = FakeModel([
        ToolCall("c1", SEARCH_TOOLS, {"query": "track a shipment"}),
        RuntimeError("the worker died"),
    ])  # fmt: skip
    with pytest.raises(RuntimeError):
        run(model, registry, routing_for(registry), checkpoint=checkpoint)
    saved = checkpoint.last_state()  # the search's result recorded, not yet in the messages
    assert [r.name for r in saved.results.values()] == [SEARCH_TOOLS]
    # Another worker: a fresh registry, index and loop, from the record only.
    registry = many_tools(60)
    model = FakeModel(["done"])
    state = RunState.from_dict(saved.to_dict())
    outcome, sink = run(model, registry, routing_for(registry), state=state)
    assert outcome.status is RunStatus.SUCCEEDED
    assert "track_shipment" in offered(model.requests[0])
    assert "get_weather_forecast" in offered(model.requests[0])
    assert sink.of("tools.offered")[0]["round"] == 2


def test_a_run_resumed_after_an_approval_still_offers_the_tool_it_called():
    refund = replace(
        as_tool(_card("refund_card_payment", "Refund a card payment, e.g. a double charge.")),
        capability=Capability(effect=Effect.WRITE, requires_approval=True),
    )
    registry = many_tools(60, refund)
    checkpoint = SavingCheckpointer()
    model = FakeModel([ToolCall("c1", "refund_card_payment", {"payment": "pi_1"})])
    ask = "Refund the double charge on my card payment"
    outcome, _ = run(model, registry, routing_for(registry), input=ask, checkpoint=checkpoint)
    assert outcome.status is RunStatus.AWAITING_APPROVAL
    assert "refund_card_payment" in offered(model.requests[0])

    registry = many_tools(60, refund)
    model = FakeModel(["Refunded."])
    state = RunState.from_dict(checkpoint.last_state().to_dict())
    decisions = {"c1": Decision(approved=True, by="alice")}
    outcome, sink = run(
        model, registry, routing_for(registry), state=state, decisions=decisions
    )  # fmt: skip
    assert outcome.status is RunStatus.SUCCEEDED
    assert "refund_card_payment" in offered(model.requests[0])
    assert sink.of("tool.completed")[0]["name"] == "refund_card_payment"
    assert "refund_card_payment" in sink.of("tools.offered")[0]["found"]


def test_a_selection_model_picks_from_the_shortlist_and_its_usage_counts():
    registry = many_tools(60)
    model = FakeModel([
        ModelResponse(text="get_weather_forecast\nnot_a_tool", usage=Usage(40, 3)),
        ModelResponse(text="Take one.", usage=Usage(100, 5)),
    ])  # fmt: skip
    routing = routing_for(registry, selection_model="small-model")
    outcome, sink = run(model, registry, routing)
    assert outcome.status is RunStatus.SUCCEEDED
    selection, answer = model.requests
    assert selection.model == "small-model" and selection.tools == ()
    assert (selection.max_tokens, selection.temperature) == (200, 0)  # a short, stable pick
    assert "get_weather_forecast" in selection.messages[0].text
    assert offered(answer) == ["get_weather_forecast", SEARCH_TOOLS]
    assert sink.of("tools.offered")[0]["routed"] == ["get_weather_forecast"]
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (140, 8)


def test_a_failing_selection_model_leaves_the_ranking_and_the_event_says_so():
    registry = many_tools(60)
    model = FakeModel([RateLimited("slow down"), "Take one."])
    routing = routing_for(registry, selection_model="small-model")
    outcome, sink = run(model, registry, routing)
    assert outcome.status is RunStatus.SUCCEEDED
    (event,) = sink.of("tools.offered")
    assert len(event["routed"]) == 5
    assert event["note"].startswith("the selection model failed (")
    assert event["note"].endswith("): ranking kept")


def test_a_call_of_a_tool_this_round_did_not_offer_still_runs():
    """Routing picks what each round offers; every tool of the agent stays callable (only
    results_without_tools drops calls of tools not offered)."""
    registry = many_tools(60)
    model = FakeModel([ToolCall("c1", "track_shipment", {"tracking_number": "1Z9"}), "ok"])
    outcome, sink = run(model, registry, routing_for(registry))
    assert outcome.status is RunStatus.SUCCEEDED
    assert "track_shipment" not in offered(model.requests[0])
    assert [e["name"] for e in sink.of("tool.completed")] == ["track_shipment"]
    assert sink.of("tool_calls.refused") == []


def test_a_forced_tool_and_the_callers_tools_stay_offered():
    registry = many_tools(60)
    model = FakeModel([ToolCall("c1", "send_sms", {"to": "+1", "text": "hi"}), "sent"])
    outcome, _ = run(model, registry, routing_for(registry), spec=spec(tool_choice="send_sms"))
    assert outcome.status is RunStatus.SUCCEEDED
    assert "send_sms" in offered(model.requests[0])


def test_the_platforms_memory_tools_renamed_beside_the_callers_stay_offered():
    """A caller's `remember_fact` keeps its name; the platform's, as `remember_fact_2`, is
    still offered every round as the memory tools are."""
    registry = many_tools(60)
    theirs = ClientTool("remember_fact", "The caller's note.").as_tool()
    model = FakeModel(["sunny"])
    outcome, _ = run(
        model, registry, routing_for(registry), spec=spec(memory=True, client_tools=(theirs,)),
        facts=DjangoFactStore(MemorySettings.default()),
    )  # fmt: skip
    assert outcome.status is RunStatus.SUCCEEDED
    names = offered(model.requests[0])
    assert {"remember_fact", "remember_fact_2", "recall_facts", "forget_fact"} <= set(names)
    assert "with remember_fact_2" in model.requests[0].system


def test_search_tools_is_a_reserved_name():
    assert SEARCH_TOOLS in PLATFORM_TOOL_NAMES


def _card(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "tags": [], "examples": [],
            "input_schema": {"type": "object"}}  # fmt: skip


# -- the platform: settings, the tenant's index, a run through the engine --------------------
WEATHER_TOOLS = {
    "get_weather_forecast": "Daily weather forecast (rain, temperature, wind) for a city.",
    "get_air_quality": "Air quality index and pollutant levels for a city.",
    "track_shipment": "Current status of a parcel by its tracking number.",
    "send_sms": "Send a text message to a mobile number.",
    "convert_currency": "Convert an amount between currencies at today's rate.",
    "office_wifi": "Tell the office Wi-Fi password.",
}


@pytest.fixture
def many_definitions(trio, settings):
    settings.TOOL_ROUTING_THRESHOLD = 5
    settings.TOOL_ROUTING_TOP_K = 2
    settings.TOOL_ROUTING_SEMANTIC = False
    from tools.models import ToolDefinition

    for name, description in WEATHER_TOOLS.items():
        ToolDefinition.objects.create(
            tenant=trio.acme,
            name=name,
            description=description,
            kind="http",
            tags=["pinned"] if name == "office_wifi" else [],
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            config={"method": "GET", "url": "https://api.example.com/tool"},
        )


@pytest.mark.django_db
def test_a_run_of_an_agent_with_many_tools_is_offered_the_routed_ones(
    trio, agent, many_definitions, provider_server
):
    from agents.models import RunEvent
    from agents.runs import run_inline
    from agents.tool_sources import effective_tools
    from tests.fakes.provider_server import TextReply

    provider_server.script("openai", TextReply("Bring a coat."))
    run = run_inline(tenant=trio.acme, agent=agent, input="What's the weather forecast in Oslo?")
    assert run.status == "succeeded", run.error
    body = provider_server.requests_to("/v1/chat/completions")[0].body
    offered = [tool["function"]["name"] for tool in body["tools"]]
    assert "get_weather_forecast" in offered
    assert {"office_wifi", SEARCH_TOOLS} <= set(offered)
    assert len(offered) <= 2 + 2
    (event,) = RunEvent.objects.filter(run=run, type="tools.offered")
    assert event.payload["tools"] == offered
    assert event.payload["routed"] == ["get_weather_forecast"]  # the one sharing words with it
    assert event.payload["of"] == len(effective_tools(agent)) > 5


class TopicEmbedder:
    """Vectors over three topics (weather, parcels, money): a stand-in model, so that
    "is it going to pour" (no word shared with any tool) has a meaning to rank by."""

    TOPICS = (("weather", "rain", "pour", "forecast"), ("parcel", "shipment"),
              ("currenc", "money", "sms"))  # fmt: skip

    def __init__(self) -> None:
        self.name = f"topics-{uuid.uuid4().hex}"  # (nothing cached under it by an earlier run)
        self.calls: list[list[str]] = []

    async def embed(self, texts):
        self.calls.append(list(texts))
        return [
            [0.01 + sum(text.lower().count(word) for word in topic) for topic in self.TOPICS]
            for text in texts
        ]


@pytest.mark.django_db
def test_a_run_ranks_by_meaning_with_the_registered_embedders(
    trio, agent, many_definitions, provider_server, settings, monkeypatch
):
    from agents import tool_routing as platform
    from agents.models import RunEvent
    from agents.runs import run_inline
    from tests.fakes.provider_server import TextReply

    settings.TOOL_ROUTING_SEMANTIC = True
    embedder = TopicEmbedder()
    monkeypatch.setattr(platform, "_embedders", {})
    platform.register_routing_embedder(cards=embedder, requests=embedder)
    provider_server.script("openai", TextReply("Take an umbrella."))
    run = run_inline(tenant=trio.acme, agent=agent, input="Is it going to pour tomorrow?")
    assert run.status == "succeeded", run.error
    (event,) = RunEvent.objects.filter(run=run, type="tools.offered")
    assert event.payload["routed"][0] == "get_weather_forecast"
    assert "note" not in event.payload  # (no fallback to lexical)
    assert embedder.calls[-1] == ["Is it going to pour tomorrow?"]  # the request, once
    assert len(embedder.calls[0]) > 5  # the cards, in one batch, before


@pytest.mark.django_db
def test_the_tenants_index_is_built_once_per_version_and_cards_embedded_once(
    trio, many_definitions, settings, monkeypatch
):
    from agents import tool_routing as platform
    from tools.loader import tenant_tools
    from tools.models import ToolDefinition

    settings.TOOL_ROUTING_SEMANTIC = True
    embedded: list[str] = []

    class CountingEmbedder:
        name = f"counting-{uuid.uuid4().hex}"  # (nothing cached under it by an earlier run)

        async def embed(self, texts):
            embedded.extend(texts)
            return [[float(len(t)), 1.0, float(t.count("weather"))] for t in texts]

    monkeypatch.setattr(platform, "_embedders", {})
    platform.register_routing_embedder(cards=CountingEmbedder(), requests=CountingEmbedder())
    first = platform.tool_index(trio.acme.pk, tenant_tools(trio.acme))
    assert first.semantic is not None
    assert len(first) == len(tenant_tools(trio.acme).registry)
    texts = [card.text for card in first.cards] + [card.description for card in first.cards]
    assert sorted(embedded) == sorted(set(texts))  # each card and description, once
    assert platform.tool_index(trio.acme.pk, tenant_tools(trio.acme)) is first
    ToolDefinition.objects.filter(tenant=trio.acme, name="send_sms").update(
        description="Send an SMS to a phone."
    )
    from base.versions import config_bump

    config_bump(trio.acme.pk)
    second = platform.tool_index(trio.acme.pk, tenant_tools(trio.acme))
    assert second is not first
    changed = [second.card("send_sms").text, "Send an SMS to a phone."]
    assert embedded[len(set(texts)) :] == changed  # only the changed card and description


@pytest.mark.django_db
def test_one_tenants_index_being_built_holds_up_no_other_tenant(trio, many_definitions):
    """Embedding a tenant's new cards takes seconds: it holds that tenant's lock only."""
    from agents import tool_routing as platform
    from tools.loader import tenant_tools

    with platform._tenant_lock(trio.acme.pk):  # acme's index "being built" meanwhile
        index = platform.tool_index(trio.globex.pk, tenant_tools(trio.globex))
    assert len(index) == len(tenant_tools(trio.globex).registry)
