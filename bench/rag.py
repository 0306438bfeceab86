"""Knowledge-base figures: ingestion throughput against the embedder alone, and filtered
HNSW search at 100k chunks across 100 tenants against exact search.

Run: cd /work/main && .venv/bin/python bench/rag.py
(prints the figures, writes bench/results/rag.json; BENCH_SMOKE=1: 5 tenants x 100 chunks,
10 queries). Needs the local-embeddings extra.
Starts the embedded PostgreSQL and Redis in a temporary DATA_DIR (removed at exit).

1. Ingestion: the corpus of tests/data/rag repeated into one markdown document of about
   INGEST_CHUNKS chunks, ingested in this process by `rag.ingestion.ingest` (extract,
   chunk, embed with the local model in batches, one transaction of inserts) vs
   the local model's `embed_sync` called alone on the same chunk texts, same batches.
   Ratio = ingestion chunks/s over embedder chunks/s (target >= 0.8).
2. Search: 100 tenants x 1000 chunks of synthetic unit vectors (384 dims; clustered around
   TOPICS_PER_TENANT topics per tenant, as text embeddings are) COPYed in, the HNSW
   index (m=16, ef_construction=64, pgvector's defaults) built after; QUERIES queries, each
   for one tenant's knowledge base, top 10: the query rag/search.py runs (iterative scan,
   relaxed order, ef_search RAG_HNSW_EF_SEARCH, re-sorted) vs the exact ordering (index
   scans off). p50/p99 latency of the SQL (the query embedding is not part of it) and
   recall@10 (targets: recall >= 0.95, p50 < 20 ms). At 1000 chunks a tenant the planner
   filters by tenant with the B-tree index and orders exactly (the production plan); the
   same query with the filter hidden from the B-tree (`+ 0`) and sequential scans off is
   measured too, as the HNSW path a large knowledge base gets.
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import configure_django, sized, write_results  # noqa: E402

INGEST_CHUNKS = sized(400, smoke=40)
TENANTS = sized(100, smoke=5)
CHUNKS_PER_TENANT = sized(1000, smoke=100)
DIMENSIONS = 384
QUERIES = sized(300, smoke=10)
TOPICS_PER_TENANT = 20
NOISE = 1.0  # the noise vector's length against a unit topic
TOP_K = 10
TARGET_RATIO = 0.8
TARGET_RECALL = 0.95
TARGET_P50_MS = 20.0


def bench_ingestion() -> dict:
    from rag import services
    from rag.embedders import local_embedder
    from rag.ingestion import _embedding_input, ingest
    from rag.runtime.chunking import chunk_text
    from rag.runtime.extract import extract
    from tenancy.services import tenant_create

    corpus = "\n\n".join(p.read_text() for p in sorted((ROOT / "tests/data/rag").glob("*.md")))
    size, overlap = 120, 20
    per_copy = len(chunk_text(corpus, size=size, overlap=overlap))
    text = "\n\n".join([corpus] * max(1, INGEST_CHUNKS // per_copy))
    tenant = tenant_create(slug="ingest", name="Ingest")
    kb = services.knowledge_base_save(
        tenant=tenant,
        changes={"name": "Bench", "slug": "bench", "embedder": "local", "chunk_size": size,
                 "chunk_overlap": overlap},
    )  # fmt: skip
    embedder = local_embedder()
    embedder.embed_sync(["warm up the model"] * 64)
    chunks = chunk_text(extract(text.encode(), filename="b.md").text, size=size, overlap=overlap)
    texts = [_embedding_input(c.heading_path, c.text) for c in chunks]
    from django.conf import settings

    batch = settings.RAG_EMBED_BATCH_SIZE
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        embedder.embed_sync(texts[i : i + batch])
    embed_s = time.perf_counter() - started
    document = services.document_add(tenant=tenant, knowledge_base=kb, title="b.md", text=text)
    started = time.perf_counter()
    assert ingest(document.pk) == "ready"
    ingest_s = time.perf_counter() - started
    document.refresh_from_db()
    assert document.chunk_count == len(chunks)
    embed_rate, ingest_rate = len(chunks) / embed_s, len(chunks) / ingest_s
    return {
        "chunks": len(chunks),
        "embedder_alone_chunks_per_s": round(embed_rate, 1),
        "ingestion_chunks_per_s": round(ingest_rate, 1),
        "ratio": round(ingest_rate / embed_rate, 3),
        "target_ratio": TARGET_RATIO,
    }


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def near(rng, topics: np.ndarray, count: int) -> np.ndarray:
    """Unit vectors around a tenant's topics (cosine about 0.7 to their topic): text
    embeddings cluster by subject; uniformly random vectors (no clusters at all) are a
    worst case no real corpus has."""
    picked = topics[rng.integers(len(topics), size=count)]
    noise = rng.standard_normal((count, topics.shape[1])) * (NOISE / np.sqrt(topics.shape[1]))
    return unit(picked + noise)


def bench_search() -> dict:
    from django.db import connection, transaction

    from rag.models import Document, KnowledgeBase
    from rag.search import vector_literal, vector_sql
    from tenancy.models import Tenant

    rng = np.random.default_rng(7)
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"t{i}", name=f"T{i}") for i in range(TENANTS)]
    )
    bases = KnowledgeBase.objects.bulk_create(
        [KnowledgeBase(tenant=t, name="KB", slug="kb", embedder="local",
                       embedding_model="all-MiniLM-L6-v2", dimensions=DIMENSIONS) for t in tenants]
    )  # fmt: skip
    documents = Document.objects.bulk_create(
        [Document(tenant=t, knowledge_base=b, title="synthetic", source="text", status="ready")
         for t, b in zip(tenants, bases, strict=True)]
    )  # fmt: skip
    topics: dict[int, np.ndarray] = {}
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS rag_chunk_hnsw_384")
        with cursor.copy(
            "COPY rag_chunk (tenant_id, knowledge_base_id, document_id, ordinal, text, "
            "token_count, heading_path, embedding, dimensions) FROM STDIN"
        ) as copy:
            for t, b, d in zip(tenants, bases, documents, strict=True):
                topics[t.pk] = unit(rng.standard_normal((TOPICS_PER_TENANT, DIMENSIONS)))
                vectors = near(rng, topics[t.pk], CHUNKS_PER_TENANT).astype(np.float32)
                buffer = io.StringIO()
                for i, v in enumerate(vectors):
                    literal = "[" + ",".join(f"{x:.6f}" for x in v) + "]"
                    buffer.write(f"{t.pk}\t{b.pk}\t{d.pk}\t{i}\tchunk {i}\t2\t\t{literal}\t384\n")
                copy.write(buffer.getvalue())
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        cursor.execute("SET maintenance_work_mem = '512MB'")
        cursor.execute(
            "CREATE INDEX rag_chunk_hnsw_384 ON rag_chunk USING hnsw "
            "((embedding::vector(384)) vector_cosine_ops) WHERE dimensions = 384"
        )
        cursor.execute("ANALYZE rag_chunk")
        index_s = time.perf_counter() - started
    from django.conf import settings

    column, cast = vector_sql(DIMENSIONS)
    ann_sql = f"""
        WITH nearest AS MATERIALIZED (
            SELECT id, {column} <=> %s{cast} AS distance FROM rag_chunk
            WHERE dimensions = %s AND tenant_id = %s AND knowledge_base_id = ANY(%s)
            ORDER BY distance LIMIT %s)
        SELECT id FROM nearest ORDER BY distance, id"""  # noqa: S608
    exact_sql = """
        SELECT id FROM rag_chunk
        WHERE dimensions = %s AND tenant_id = %s AND knowledge_base_id = ANY(%s)
        ORDER BY embedding <=> %s::vector, id LIMIT %s"""
    # The same search with the tenant filter hidden from the B-tree index (`+ 0`): the plan
    # the planner picks for a large knowledge base, forced here so HNSW's filtered recall
    # (iterative scan) is measured at this size too.
    forced_sql = ann_sql.replace("tenant_id = %s", "tenant_id + 0 = %s").replace(
        "knowledge_base_id = ANY(%s)", "knowledge_base_id + 0 = ANY(%s)"
    )
    latencies, recalls, forced_latencies, forced_recalls = [], [], [], []
    plan = forced_plan = ""
    for q in range(QUERIES):
        i = int(rng.integers(TENANTS))
        literal = vector_literal(near(rng, topics[tenants[i].pk], 1)[0])
        args = [literal, DIMENSIONS, tenants[i].pk, [bases[i].pk], TOP_K]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute(f"SET LOCAL hnsw.ef_search = {int(settings.RAG_HNSW_EF_SEARCH)}")
            if q == 0:
                cursor.execute("EXPLAIN " + ann_sql, args)
                plan = "\n".join(r[0] for r in cursor.fetchall())
            started = time.perf_counter()
            cursor.execute(ann_sql, args)
            found = [r[0] for r in cursor.fetchall()]
            latencies.append((time.perf_counter() - started) * 1000)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute(f"SET LOCAL hnsw.ef_search = {int(settings.RAG_HNSW_EF_SEARCH)}")
            cursor.execute("SET LOCAL enable_seqscan = off")  # the HNSW index, not a scan
            if q == 0:
                cursor.execute("EXPLAIN " + forced_sql, args)
                forced_plan = "\n".join(r[0] for r in cursor.fetchall())
            started = time.perf_counter()
            cursor.execute(forced_sql, args)
            forced = [r[0] for r in cursor.fetchall()]
            forced_latencies.append((time.perf_counter() - started) * 1000)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off")
            cursor.execute(exact_sql, [DIMENSIONS, tenants[i].pk, [bases[i].pk], literal, TOP_K])
            exact = [r[0] for r in cursor.fetchall()]
        recalls.append(len(set(found) & set(exact)) / len(exact))
        forced_recalls.append(len(set(forced) & set(exact)) / len(exact))
    latencies.sort()
    forced_latencies.sort()
    return {
        "chunks": TENANTS * CHUNKS_PER_TENANT,
        "tenants": TENANTS,
        "dimensions": DIMENSIONS,
        "queries": QUERIES,
        "copy_s": round(load_s, 1),
        "index_build_s": round(index_s, 1),
        "ef_search": settings.RAG_HNSW_EF_SEARCH,
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "recall_at_10": round(statistics.mean(recalls), 4),
        "uses_hnsw_index": "rag_chunk_hnsw_384" in plan,
        "hnsw_forced": {
            "p50_ms": round(statistics.median(forced_latencies), 2),
            "p99_ms": round(forced_latencies[int(len(forced_latencies) * 0.99) - 1], 2),
            "recall_at_10": round(statistics.mean(forced_recalls), 4),
            "uses_hnsw_index": "rag_chunk_hnsw_384" in forced_plan,
        },
        "target_recall": TARGET_RECALL,
        "target_p50_ms": TARGET_P50_MS,
    }


def main() -> None:
    configure_django("bench-rag-")
    load = os.getloadavg()[0]
    ingestion = bench_ingestion()
    print("ingestion:", json.dumps(ingestion))
    search = bench_search()
    print("search:   ", json.dumps(search))
    results = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2)},
        "ingestion": ingestion,
        "search": search,
    }  # fmt: skip
    forced = search["hnsw_forced"]
    print(f"ratio {ingestion['ratio']} (target >= {TARGET_RATIO})")
    print(
        f"planner's plan (HNSW: {search['uses_hnsw_index']}): recall@10 "
        f"{search['recall_at_10']} (>= {TARGET_RECALL}); p50 {search['p50_ms']} ms "
        f"(< {TARGET_P50_MS}); p99 {search['p99_ms']} ms"
    )
    print(f"HNSW forced (HNSW: {forced['uses_hnsw_index']}): recall@10 {forced['recall_at_10']}"
          f"; p50 {forced['p50_ms']} ms; p99 {forced['p99_ms']} ms")  # fmt: skip
    headline = {
        "ingestion / embedder ratio": ingestion["ratio"],
        "recall@10": search["recall_at_10"],
        "p50 ms": search["p50_ms"],
        "HNSW forced recall@10": forced["recall_at_10"],
        "HNSW forced p50 ms": forced["p50_ms"],
    }
    write_results("rag", results, headline=headline)


if __name__ == "__main__":
    main()
