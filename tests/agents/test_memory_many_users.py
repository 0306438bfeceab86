"""Memory under many people at once: several members of one tenant run the same memory agent
concurrently (in one event loop, as a runs worker holds them) against a slow model that
recalls in its first round. On the production store (PostgreSQL full text and pgvector),
each run recalls its own person's facts, the right one first, and nothing one person
remembered reaches another person's run: asserted on what the model was sent."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import async_to_sync

from agents import runs
from agents.memory import DjangoFactStore, MemorySettings
from agents.models import Run
from agents.runs import bridge, execute_run_async
from tests.agents.workers import TurnTakingProviderServer
from tests.factories import add_member, make_agent, make_connection, make_user
from tools.runtime.context import RunContext

pytestmark = pytest.mark.django_db

RUNS_EACH = 4
LATENCY_S = 0.5
QUERY = "what does the user drink"
FACTS = {  # the drink first: what the query should find first
    "alice": ["Drinks green tea every morning.", "Plays chess on Sundays."],
    "bob": ["Drinks espresso after lunch.", "Collects vinyl records."],
    "carol": ["Drinks oat milk lattes at work.", "Is learning Portuguese."],
    "dave": ["Drinks sparkling water only.", "Runs marathons in spring."],
}


@pytest.fixture
def slow_model(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = TurnTakingProviderServer(tool_name="recall_facts", arguments={"query": QUERY})
    server.latency_s = LATENCY_S  # every answer, at once for all (delay_s would queue them)
    try:
        yield server
    finally:
        server.close()


def test_concurrent_runs_of_several_people_each_recall_their_own_facts_only(trio, slow_model):
    make_connection(
        trio.acme, "Slow OpenAI", "openai", api_key="sk-test", base_url=slow_model.openai_base_url,
        default_model="gpt-test", is_default=True, max_retries=0,
    )  # fmt: skip
    agent = make_agent(trio.acme, "pal", memory=True)
    people = {"alice": trio.alice, "bob": trio.bob}
    for name in ("carol", "dave"):
        people[name] = make_user(name)
        add_member(trio.acme, people[name])
    store = DjangoFactStore(MemorySettings.of(agent))
    for name, facts in FACTS.items():
        for text in facts:  # remembered as a run's tool call does: embedded, on the real store
            ctx = RunContext(trio.acme.pk, user_id=people[name].pk)
            async_to_sync(store.remember)(ctx=ctx, text=text)

    started: dict[int, str] = {}
    for turn in range(RUNS_EACH):
        for name, user in people.items():
            run = runs.run_start(tenant=trio.acme, agent=agent, input=f"I am {name}, turn {turn}.",
                                 initiated_by=user, enqueue=False)  # fmt: skip
            started[run.pk] = name

    async def together() -> list[str]:
        return list(await asyncio.gather(*(execute_run_async(pk) for pk in started)))

    began = time.perf_counter()
    assert bridge.call(together) == ["succeeded"] * len(started)
    # They overlapped: one after another, RUNS_EACH x 4 runs of 2 model latencies each.
    assert time.perf_counter() - began < 4 * 2 * LATENCY_S

    # What each run's tool call found: its person's facts, the drink first.
    for pk, name in started.items():
        completed = Run.objects.get(pk=pk).events.get(type="tool.completed").payload
        assert completed["error"] is None, completed
        texts = [fact["text"] for fact in completed["result"]["facts"]]
        assert texts[0] == FACTS[name][0] and sorted(texts) == sorted(FACTS[name]), (name, texts)
    # What the model was sent: each person's recall carries their facts, nobody else's.
    with_results = 0
    for request in slow_model.requests_to("/v1/chat/completions"):
        sent = json.dumps(request.body)
        asker = next(name for name in FACTS if f"I am {name}," in sent)
        others = [text for name, facts in FACTS.items() if name != asker for text in facts]
        assert not [text for text in others if text in sent], (asker, sent)
        if any(message.get("role") == "tool" for message in request.body["messages"]):
            with_results += 1
            assert all(text in sent for text in FACTS[asker]), (asker, sent)
    assert with_results == len(started)
