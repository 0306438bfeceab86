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
FULL = {"users": 20, "facts": 1000, "calls": 300}
SMOKE_SIZE = {"users": 2, "facts": 200, "calls": 20}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few facts and calls")
    smoke = parser.parse_args().smoke or SMOKE  # `make bench-smoke` sets BENCH_SMOKE=1
    configure_django("bench-memory-")
    from agents.memory import fact_embedder

    registered = fact_embedder().name if fact_embedder() else None
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
    results = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2)},
        "registered_model": registered,
        "quality": quality,
        "cost": cost,
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
        },
    )


if __name__ == "__main__":
    main()
