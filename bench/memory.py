"""Fact recall (agents/memory/): how well it finds a user's facts, and what one recall costs.

Run: cd /work/main && .venv/bin/python bench/memory.py [--smoke]
(prints the figures, writes bench/results/memory.json). Starts the embedded PostgreSQL and
Redis in a temporary DATA_DIR (removed at exit). `--smoke`: a few facts and calls, seconds.

1. Quality: tests/data/memory/recall.json (42 facts of three users, 37 questions with the
   facts answering them) through the production store, recall@1/@3/@5 for each model
   (MiniLM when the local-embeddings extra is installed, the static model, words only) and
   for the former recall (every word of the query in the fact, as a substring: AND).
2. Cost: `users` users of one tenant with `facts` synthetic facts each (a tenant per model,
   its facts embedded by it), `calls` recalls of one user cycling through the labelled
   questions: p50/p99 of the whole recall as a run's tool calls it (embedding the query,
   the check for facts without a vector, the ranking statement), of the ranking statement
   alone, of the former AND query, and of remembering one fact; the variants interleaved
   call by call, so that a busy machine weighs on all alike. Queries per recall counted.
3. In a run: an agent run with memory on against the same run with memory off, interleaved
   run by run (`agents.runs.run_inline`, the fake provider server of tests/fakes/ in a
   thread, the registered fact model: what production recalls with). Both runs take 3
   model rounds; with memory the model calls `recall_facts` (a query, over the person's
   `facts` facts) in round 1 and `remember_fact` in round 2, without it the no-cost
   `calculator` twice (the same agent otherwise, every tool on). Figures: median ms per
   run of each side, their difference (what recall and remember add to a run over the
   cheapest tool calls, the memory tools' registry and prompt included), and p50/p99 of the time
   inside the store's recall and remember (timers around DjangoFactStore's methods).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import SMOKE, configure_django, write_results  # noqa: E402

DATA = json.loads((ROOT / "tests/data/memory/recall.json").read_text())
FULL = {"users": 20, "facts": 1000, "calls": 300, "runs": 40}
SMOKE_SIZE = {"users": 2, "facts": 200, "calls": 20, "runs": 3}
RUN_WARMUP = 2
TOP = 10  # what recall_facts asks for with a query (agents.runtime.memory.RECALL_TOP)

VERBS = [
    "Likes", "Dislikes", "Prefers", "Often mentions", "Is interested in", "Asked about",
    "Bought", "Wants to try", "Recommended", "Has been to", "Is learning about", "Avoids",
]  # fmt: skip
THINGS = [
    "green tea", "espresso", "jazz", "hiking", "Lisbon", "sushi", "board games", "chess",
    "oat milk", "cycling", "Kyoto", "dark chocolate", "podcasts", "sci-fi novels", "yoga",
    "sourdough bread", "vinyl records", "tennis", "Python", "Rust", "gardening", "camping",
    "opera", "marathons", "electric cars", "photography", "ramen", "Berlin", "pottery",
    "surfing", "climbing", "crosswords", "Spanish lessons", "red wine", "standing desks",
    "mechanical keyboards", "audiobooks", "birdwatching", "salsa dancing", "kayaking",
    "Thai food", "jigsaw puzzles", "cold showers", "meal prepping", "Iceland", "sketching",
    "comic books", "film cameras", "the piano", "meditation", "spreadsheets", "spicy food",
    "fountain pens", "museums", "",
]  # fmt: skip
WHEN = [
    "", " on weekends", " with friends", " at work", " in the evening", " since 2019",
    " when travelling", " with the kids", " during winter", " every morning",
]  # fmt: skip


def synthetic_facts(count: int, seed: int = 7) -> list[str]:
    combos = [f"{v} {t}{w}." for v in VERBS for t in THINGS for w in WHEN]
    return random.Random(seed).sample(combos, count)  # noqa: S311 (a fixed sample)


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def models() -> dict:
    from rag.embedders import local_model_installed, static_embedder

    found = {"static": static_embedder(), "words only": None}
    if local_model_installed():
        from rag.runtime.minilm_onnx import OnnxMiniLM

        found = {"minilm": OnnxMiniLM(), **found}
    return found


def former_recall(tenant_id: int, user_id: int, query: str, limit: int) -> list[str]:
    """The recall before it was hybrid: every word (the first five) as a substring."""
    from agents.models import Fact

    facts = Fact.objects.filter(tenant_id=tenant_id, user_id=user_id)
    for word in query.split()[:5]:
        facts = facts.filter(text__icontains=word)
    return list(facts.order_by("-id").values_list("text", flat=True)[:limit])


def bench_quality(embedders: dict) -> dict:
    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model

    from agents.memory import DjangoFactStore, MemorySettings, register_fact_embedder
    from tenancy.services import tenant_create
    from tools.runtime.context import RunContext

    store = DjangoFactStore(MemorySettings.default())
    owners = {}
    for name in DATA["facts"]:
        user = get_user_model().objects.create_user(username=f"quality-{name}")
        owners[name] = (tenant_create(slug=f"quality-{name}", name=name), user)

    def measure(recall) -> dict:
        found = {1: 0.0, 3: 0.0, 5: 0.0}
        for case in DATA["queries"]:
            tenant, user = owners[case["user"]]
            recalled = recall(tenant.pk, user.pk, case["query"])
            expected = set(case["expected"])
            for k in found:
                found[k] += len(expected & set(recalled[:k])) / len(expected)
        return {f"recall@{k}": round(v / len(DATA["queries"]), 3) for k, v in found.items()}

    results = {}
    for label, embedder in embedders.items():
        register_fact_embedder(embedder)
        if not results:  # remembered once; recall embeds them again for each next model
            for name, texts in DATA["facts"].items():
                tenant, user = owners[name]
                for text in texts:
                    ctx = RunContext(tenant.pk, user_id=user.pk)
                    async_to_sync(store.remember)(ctx=ctx, text=text)

        def hybrid(tenant_id, user_id, query):
            ctx = RunContext(tenant_id, user_id=user_id)
            found = async_to_sync(store.recall)(ctx=ctx, query=query, limit=TOP)
            return [fact["text"] for fact in found]

        results[label] = measure(hybrid)
    results["former (AND)"] = measure(lambda t, u, q: former_recall(t, u, q, TOP))
    return results


def bench_cost(embedders: dict, size: dict) -> dict:
    """Every variant's call in turn, round after round, so that they share whatever else
    the machine is doing (an idle machine gives lower figures for all of them)."""
    from asgiref.sync import async_to_sync, sync_to_async
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.memory import DjangoFactStore, MemorySettings, reach_of, register_fact_embedder
    from agents.memory.recall import _ranked  # the statement alone
    from agents.models import Fact
    from tenancy.services import tenant_create
    from tools.runtime.context import RunContext

    store = DjangoFactStore(MemorySettings.default())
    texts = synthetic_facts(size["facts"])
    users = [
        get_user_model().objects.create_user(username=f"cost-{n}") for n in range(size["users"])
    ]
    queries = [case["query"] for case in DATA["queries"]]
    calls = size["calls"]
    tenants = {}
    for label, embedder in embedders.items():  # a tenant per model, its facts embedded by it
        tenants[label] = tenant = tenant_create(slug=f"cost-{label.replace(' ', '-')}", name=label)
        vectors, name = [None] * len(texts), ""
        if embedder is not None:
            vectors, name = [], embedder.name
            for start in range(0, len(texts), 64):
                vectors += async_to_sync(embedder.embed)(texts[start : start + 64])
        for user in users:
            Fact.objects.bulk_create(
                Fact(tenant=tenant, user=user, text=text, embedding=vector, embedder=name)
                for text, vector in zip(texts, vectors, strict=True)
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agents_fact")
    user, writer = users[0], users[-1]

    async def recall(label: str, query: str) -> None:
        register_fact_embedder(embedders[label])
        tenant = tenants[label]
        await store.recall(ctx=RunContext(tenant.pk, user_id=user.pk), query=query, limit=TOP)

    async def ranking(label: str, query: str) -> None:
        """The ranking statement alone (on a database thread, as recall runs it)."""
        embedder, tenant = embedders[label], tenants[label]
        vector = (await embedder.embed([query]))[0] if embedder is not None else None
        name = embedder.name if embedder is not None else None
        started = time.perf_counter()
        reach = reach_of(MemorySettings.default(), RunContext(tenant.pk, user_id=user.pk))
        await sync_to_async(_ranked)(reach, query, name, vector, TOP)
        return time.perf_counter() - started

    async def remember(label: str, query: str) -> None:
        register_fact_embedder(embedders[label])
        tenant = tenants[label]
        await store.remember(ctx=RunContext(tenant.pk, user_id=writer.pk), text=query)

    async def former(label: str, query: str) -> None:
        await sync_to_async(former_recall)(tenants[label].pk, user.pk, query, TOP)

    variants = [(f"{label}: recall", recall, label) for label in embedders]
    variants += [(f"{label}: ranking statement", ranking, label) for label in embedders]
    variants += [(f"{label}: remember", remember, label) for label in embedders]
    variants.append(("former (AND): recall", former, "words only"))

    async def rounds() -> dict[str, list[float]]:
        """In one event loop, as a run's tool calls are (statements on a database thread)."""
        took: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for n in range(-1, calls):  # round -1 warms the models and the connection
            query = queries[n % len(queries)]
            for name, call, label in variants:
                started = time.perf_counter()
                inner = await call(label, query)
                if n >= 0:
                    took[name].append(inner if inner is not None else time.perf_counter() - started)
        return took

    took = asyncio.run(rounds())
    results: dict = {"users": size["users"], "facts_per_user": size["facts"], "calls": calls}
    for label in embedders:
        with CaptureQueriesContext(connection) as captured:
            async_to_sync(recall)(label, queries[0])
        results[label] = {
            "recall": percentiles(took[f"{label}: recall"]),
            "ranking_statement": percentiles(took[f"{label}: ranking statement"]),
            "queries_per_recall": len(captured.captured_queries),
            "remember": percentiles(took[f"{label}: remember"]),
        }
    results["former (AND)"] = {
        "recall": percentiles(took["former (AND): recall"]),
        "queries_per_recall": 1,
    }
    return results


def bench_runs(size: dict, embedder) -> dict:
    """An agent run with memory against the same run without (section 3); `embedder`: the
    fact model the platform registered at start (bench_cost registered others since)."""
    import functools
    import json as jsonlib

    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model

    from agents.memory import DjangoFactStore, register_fact_embedder
    from agents.models import Agent, Fact
    from agents.runs import run_inline
    from providers.models import ProviderConnection
    from tenancy.models import Role
    from tenancy.services import membership_set, tenant_create
    from tests.fakes.provider_server import ProviderServer, TextReply, ToolCall, ToolCallReply

    server = ProviderServer(models=["gpt-test"])
    tenant = tenant_create(slug="runs", name="Runs")
    person = get_user_model().objects.create_user(username="runs-person")
    membership_set(tenant=tenant, user=person, role=Role.MEMBER)
    ProviderConnection.objects.create(
        tenant=tenant, name="Fake OpenAI", kind="openai", api_key="k", is_default=True,
        base_url=server.openai_base_url, default_model="gpt-test", max_retries=0,
    )  # fmt: skip
    agents = {
        memory: Agent.objects.create(
            tenant=tenant,
            slug=f"memory-{memory}".lower(),
            name=f"Memory {memory}",
            instructions="Help the user.",
            use_all_tools=True,
            memory=memory,
        )
        for memory in (True, False)
    }
    register_fact_embedder(embedder)
    texts = synthetic_facts(size["facts"], seed=11)
    vectors = [None] * len(texts)
    if embedder is not None:
        vectors = []
        for start in range(0, len(texts), 64):
            vectors += async_to_sync(embedder.embed)(texts[start : start + 64])
    Fact.objects.bulk_create(
        Fact(tenant=tenant, user=person, text=text, embedding=vector,
             embedder=embedder.name if embedder else "")
        for text, vector in zip(texts, vectors, strict=True)
    )  # fmt: skip
    queries = [case["query"] for case in DATA["queries"]]

    def replies(memory: bool, n: int) -> list:
        if memory:
            calls = [("recall_facts", {"query": queries[n % len(queries)]}),
                     ("remember_fact", {"fact": f"Mentioned plan number {n} today."})]  # fmt: skip
        else:
            calls = [("calculator", {"expression": "6*7"}), ("calculator", {"expression": "6*8"})]
        rounds = [ToolCallReply([ToolCall(f"c{i}", name, jsonlib.dumps(arguments))])
                  for i, (name, arguments) in enumerate(calls)]  # fmt: skip
        return [*rounds, TextReply("Done.")]

    inside: dict[str, list[float]] = {"recall": [], "remember": []}
    originals = {name: getattr(DjangoFactStore, name) for name in inside}

    def timed(name: str):
        original = originals[name]

        @functools.wraps(original)
        async def wrapper(self, **kwargs):
            started = time.perf_counter()
            try:
                return await original(self, **kwargs)
            finally:
                inside[name].append(time.perf_counter() - started)

        return wrapper

    took: dict[bool, list[float]] = {True: [], False: []}
    try:
        for name in inside:
            setattr(DjangoFactStore, name, timed(name))
        for n in range(-RUN_WARMUP, size["runs"]):
            for memory in (True, False) if n % 2 == 0 else (False, True):
                server.script("openai", *replies(memory, n))
                started = time.perf_counter()
                run = run_inline(tenant=tenant, agent=agents[memory], input="Plan my week.",
                                 initiated_by=person)  # fmt: skip
                elapsed = time.perf_counter() - started
                if run.status != "succeeded":
                    raise RuntimeError(
                        f"a run with memory={memory} ended {run.status}: {run.error}"
                    )
                failed = [e.payload for e in run.events.filter(type="tool.completed")
                          if e.payload.get("error")]  # fmt: skip
                if failed:
                    raise RuntimeError(f"a tool call failed in a run: {failed[0]}")
                if n >= 0:
                    took[memory].append(elapsed)
    finally:
        for name, original in originals.items():
            setattr(DjangoFactStore, name, original)
        server.close()
    with_memory, without = (round(statistics.median(took[m]) * 1000, 3) for m in (True, False))
    return {
        "runs": size["runs"], "facts_of_the_person": size["facts"],
        "model": embedder.name if embedder else None,
        "median_ms": {"with memory": with_memory, "without memory": without},
        "added_ms_per_run": round(with_memory - without, 3),
        "inside_store": {name: percentiles(values) for name, values in inside.items()},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few facts and calls")
    smoke = parser.parse_args().smoke or SMOKE  # `make bench-smoke` sets BENCH_SMOKE=1
    configure_django("bench-memory-")
    from agents.memory import fact_embedder

    production = fact_embedder()  # what rag registered: recall in runs uses it
    registered = production.name if production else None
    load = os.getloadavg()[0]
    embedders = models()
    quality = bench_quality(embedders)
    for label, figures in quality.items():
        print(f"quality  {label:13} " + "  ".join(f"{k} {v}" for k, v in figures.items()))
    cost = bench_cost(embedders, SMOKE_SIZE if smoke else FULL)
    print(f"cost: one user of {cost['facts_per_user']} facts ({cost['users']} users in the "
          f"tenant), {cost['calls']} recalls")  # fmt: skip
    for label in (*embedders, "former (AND)"):
        figures = cost[label]
        recall = figures["recall"]
        line = (
            f"cost     {label:13} recall p50 {recall['p50_ms']} ms p99 {recall['p99_ms']} ms"
            f", {figures['queries_per_recall']} queries"
        )
        if "ranking_statement" in figures:
            line += (
                f"; ranking statement p50 {figures['ranking_statement']['p50_ms']} ms"
                f"; remember p50 {figures['remember']['p50_ms']} ms"
            )
        print(line)
    in_runs = bench_runs(SMOKE_SIZE if smoke else FULL, production)
    print(f"in runs: {in_runs['runs']} runs per side, the person has "
          f"{in_runs['facts_of_the_person']} facts, model {in_runs['model']}")  # fmt: skip
    for side, ms in in_runs["median_ms"].items():
        print(f"run      {side:15} median {ms} ms/run (3 model rounds)")
    store = in_runs["inside_store"]
    print(
        f"memory adds {in_runs['added_ms_per_run']} ms per run over two calculator calls; "
        f"inside the store: recall p50 {store['recall']['p50_ms']} ms "
        f"p99 {store['recall']['p99_ms']} ms, remember p50 {store['remember']['p50_ms']} ms"
    )
    results = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2)},
        "registered_model": registered,
        "quality": quality,
        "cost": cost,
        "runs": in_runs,
    }  # fmt: skip
    best = next(iter(embedders))  # MiniLM when installed, else the static model
    write_results(
        "memory",
        results,
        headline={
            f"recall@3 {best}": quality[best]["recall@3"],
            "recall@3 former (AND)": quality["former (AND)"]["recall@3"],
            f"recall p50 ms {best}": cost[best]["recall"]["p50_ms"],
            "recall p50 ms former (AND)": cost["former (AND)"]["recall"]["p50_ms"],
            "run ms without memory": in_runs["median_ms"]["without memory"],
            "run ms with memory": in_runs["median_ms"]["with memory"],
            "memory adds ms/run": in_runs["added_ms_per_run"],
        },
    )


if __name__ == "__main__":
    main()
