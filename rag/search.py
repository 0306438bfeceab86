"""Hybrid search over a tenant's knowledge bases: HNSW vectors + Postgres full text, fused.

Per call: one embedding of the query per distinct embedder among the knowledge bases
(outside any transaction), then one transaction running one vector query per embedder
group and one full-text query. Vector queries use the per-dimension partial expression
index (``(embedding::vector(384)) <=> q`` with ``dimensions = 384``) with pgvector's
iterative scan (``hnsw.iterative_scan = relaxed_order``), so the tenant and
knowledge-base filters do not starve the result; the candidates are re-sorted by exact
distance. Full-text ranking is ``ts_rank_cd`` against ``websearch_to_tsquery`` whose terms
are OR-ed (unless the query uses quotes, ``or`` or ``-``). Lists are fused by reciprocal
rank fusion (k = 60).

Scores: "vector" -> cosine similarity, "lexical" -> ts_rank_cd, "hybrid" (or whenever
several lists are fused, e.g. "vector" over a full-text-only knowledge base) -> the RRF sum.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import connection, transaction

from agents import quotas
from rag.embedders import embedder_for
from rag.models import HALFVEC_DIMENSIONS, INDEXED_DIMENSIONS, KnowledgeBase
from rag.runtime.embeddings import Embedder
from tenancy.models import Tenant

Mode = Literal["hybrid", "vector", "lexical"]
MODES = ("hybrid", "vector", "lexical")
RRF_K = 60
# The full-text list counts this much in the fusion beside vector lists: OR-ed question
# words ("how long does ... take") match many chunks, so its ranks are the noisier ones.
# Chosen on tests/data/rag (0.6 or less keeps every answer; 0.8 and 1.0 lose one).
LEXICAL_WEIGHT = 0.5
MAX_TOP_K = 50
_STRICT_QUERY = re.compile(r'"|(^|\s)-\w|\sor\s', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SearchHit:
    chunk_id: int
    document_id: int
    document_title: str
    knowledge_base_id: int
    text: str
    heading_path: str
    page: int | None
    score: float


def search(
    *,
    tenant: Tenant | int,
    knowledge_base_ids: Iterable[int],
    query: str,
    top_k: int = 5,
    mode: Mode = "hybrid",
    meter: quotas.Meter | None = None,
) -> list[SearchHit]:
    """The `top_k` best chunks of the tenant's knowledge bases among `knowledge_base_ids`
    (ids of other tenants are ignored). Sync; see `asearch` for the costs."""
    return async_to_sync(asearch)(
        tenant=tenant, knowledge_base_ids=knowledge_base_ids, query=query, top_k=top_k,
        mode=mode, meter=meter,
    )  # fmt: skip


async def asearch(
    *,
    tenant: Tenant | int,
    knowledge_base_ids: Iterable[int],
    query: str,
    top_k: int = 5,
    mode: Mode = "hybrid",
    meter: quotas.Meter | None = None,
) -> list[SearchHit]:
    """Async search: embeds the query (network or CPU, no transaction held), then runs the
    queries in one short transaction on a worker thread. A provider's embedding of the
    query is held against `meter`'s quotas (default: the tenant's): QuotaExceeded."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    top_k = max(1, min(int(top_k), MAX_TOP_K))
    query = query.strip()
    if not query:
        return []
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    bases = await sync_to_async(_knowledge_bases)(tenant_id, knowledge_base_ids)
    if not bases:
        return []
    groups: dict[tuple, list[KnowledgeBase]] = defaultdict(list)
    lexical_only: list[int] = []
    for base in bases:
        if base.embeds and mode != "lexical" and base.dimensions:
            key = (
                base.embedder,
                base.provider_connection_id,
                base.embedding_model,
                base.dimensions,
            )
            groups[key].append(base)
        elif not base.embeds:
            lexical_only.append(base.pk)
    vectors: list[tuple[list[int], int, list[float]]] = []
    for members in groups.values():
        metered = meter or quotas.Meter(tenant_id)
        embedder: Embedder | None = await sync_to_async(embedder_for)(members[0], metered)
        assert embedder is not None
        (vector,) = await embedder.embed([query])
        vectors.append(([b.pk for b in members], members[0].dimensions, vector))
    lexical_ids = [b.pk for b in bases] if mode in ("hybrid", "lexical") else lexical_only
    return await sync_to_async(_run)(tenant_id, query, top_k, mode, vectors, lexical_ids)


def _knowledge_bases(tenant_id: int, ids: Iterable[int]) -> list[KnowledgeBase]:
    wanted = {int(i) for i in ids}
    if not wanted:
        return []
    return list(
        KnowledgeBase.objects.select_related("provider_connection").filter(
            tenant_id=tenant_id, pk__in=wanted
        )
    )


def _run(
    tenant_id: int,
    query: str,
    top_k: int,
    mode: Mode,
    vectors: list[tuple[list[int], int, list[float]]],
    lexical_ids: list[int],
) -> list[SearchHit]:
    candidates = max(top_k * 4, 20) if mode == "hybrid" else top_k
    lists: list[list[tuple[int, float]]] = []
    weights: list[float] = []
    with transaction.atomic(), connection.cursor() as cursor:
        if vectors:
            ef_search = max(settings.RAG_HNSW_EF_SEARCH, candidates)
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
        for kb_ids, dimensions, vector in vectors:
            lists.append(_vector_ranked(cursor, tenant_id, kb_ids, dimensions, vector, candidates))
            weights.append(1.0)
        if lexical_ids:
            lists.append(_lexical_ranked(cursor, tenant_id, lexical_ids, query, candidates))
            weights.append(LEXICAL_WEIGHT if vectors else 1.0)
        kept = [(ranked, w) for ranked, w in zip(lists, weights, strict=True) if ranked]
        if not kept:
            return []
        if len(kept) == 1:
            fused = kept[0][0]
        else:
            fused = reciprocal_rank_fusion([r for r, _ in kept], weights=[w for _, w in kept])
        scored = fused[:top_k]
        return _hits(cursor, tenant_id, scored)


def vector_sql(dimensions: int) -> tuple[str, str]:
    """(column expression, query cast) matching the HNSW index for `dimensions`, so the
    planner uses it; dimensions without an index get an exact scan of their rows."""
    if dimensions in HALFVEC_DIMENSIONS:
        return f"(embedding::halfvec({dimensions}))", f"::halfvec({dimensions})"
    if dimensions in INDEXED_DIMENSIONS:
        return f"(embedding::vector({dimensions}))", f"::vector({dimensions})"
    return "embedding", "::vector"


def vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _vector_ranked(cursor, tenant_id, kb_ids, dimensions, vector, limit) -> list[tuple[int, float]]:
    column, cast = vector_sql(int(dimensions))
    # MATERIALIZED: relaxed_order may return slightly out of order; re-sort exactly outside.
    cursor.execute(
        f"""
        WITH nearest AS MATERIALIZED (
            SELECT id, {column} <=> %s{cast} AS distance
            FROM rag_chunk
            WHERE dimensions = %s AND tenant_id = %s AND knowledge_base_id = ANY(%s)
            ORDER BY distance
            LIMIT %s
        )
        SELECT id, 1 - distance FROM nearest ORDER BY distance, id
        """,  # noqa: S608 (column and cast come from vector_sql, never from input)
        [vector_literal(vector), int(dimensions), tenant_id, list(kb_ids), limit],
    )
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def tsquery_sql(query: str) -> str:
    """websearch_to_tsquery, with AND turned into OR for plain questions (every term need
    not appear; ts_rank_cd still ranks chunks with more of them first)."""
    if _STRICT_QUERY.search(query):
        return "websearch_to_tsquery('english', %s)"
    return "replace(websearch_to_tsquery('english', %s)::text, ' & ', ' | ')::tsquery"


def _lexical_ranked(cursor, tenant_id, kb_ids, query, limit) -> list[tuple[int, float]]:
    cursor.execute(
        f"""
        WITH q AS (SELECT {tsquery_sql(query)} AS query)
        SELECT c.id, ts_rank_cd(c.search, q.query, 1) AS rank
        FROM rag_chunk c, q
        WHERE c.tenant_id = %s AND c.knowledge_base_id = ANY(%s) AND c.search @@ q.query
        ORDER BY rank DESC, c.id
        LIMIT %s
        """,  # noqa: S608 (tsquery_sql returns one of two constant fragments)
        [query, tenant_id, list(kb_ids), limit],
    )
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def reciprocal_rank_fusion(
    ranked_lists: Sequence[Sequence[tuple[int, float]]],
    k: int = RRF_K,
    weights: Sequence[float] | None = None,
) -> list[tuple[int, float]]:
    """Ids by the sum of weight / (k + rank) over the lists they appear in (rank from 1)."""
    scores: dict[int, float] = defaultdict(float)
    for index, ranked in enumerate(ranked_lists):
        weight = 1.0 if weights is None else weights[index]
        for rank, (item, _) in enumerate(ranked, start=1):
            scores[item] += weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def _hits(cursor, tenant_id: int, scored: list[tuple[int, float]]) -> list[SearchHit]:
    if not scored:
        return []
    cursor.execute(
        """
        SELECT c.id, c.document_id, d.title, d.filename, d.url, c.knowledge_base_id, c.text,
               c.heading_path, c.page
        FROM rag_chunk c JOIN rag_document d ON d.id = c.document_id
        WHERE c.tenant_id = %s AND c.id = ANY(%s)
        """,
        [tenant_id, [chunk_id for chunk_id, _ in scored]],
    )
    rows = {row[0]: row for row in cursor.fetchall()}
    hits = []
    for chunk_id, score in scored:
        row = rows.get(chunk_id)
        if row is None:
            continue
        hits.append(
            SearchHit(
                chunk_id=row[0],
                document_id=row[1],
                document_title=row[2] or row[3] or row[4] or f"Document {row[1]}",
                knowledge_base_id=row[5],
                text=row[6],
                heading_path=row[7],
                page=row[8],
                score=round(score, 6),
            )
        )
    return hits
