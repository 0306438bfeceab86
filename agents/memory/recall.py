"""Recall: the facts a run may read (its `Reach`, scopes.py), ranked by meaning and words.

Recall is hybrid, as knowledge-base search is (rag/search.py): the facts ranked by full
text (any of the query's words, stemmed: `ts_rank_cd` over OR-ed terms) and by the cosine
distance of their vectors to the query's, the two lists fused by reciprocal rank. Vectors
come from the embedder an app registers (`register_fact_embedder`: rag registers its local
model; agents never import rag); without one, or when it fails, recall is by words only. A
fact is embedded when remembered or edited; facts without a vector of the current model
(remembered before recall was hybrid, when the model failed, or under another model) are
embedded by the next recall that reaches them, at most EMBED_PER_RECALL a call.

Cost of a recall with a query: one embedding of the query (on the CPU: about a millisecond
with the static model, several with MiniLM), one query finding the reachable facts without
a vector, and one statement ranking: an exact scan of the reachable facts (B-tree indexes
on tenant and user, on tenant, scope and agent, and the key's), linear in them: about 2 ms of
PostgreSQL's time at 1,000 facts. bench/memory.py prints the whole recall's p50 and p99.
No approximate index: the facts one run reaches are few, and exact is exact.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from asgiref.sync import sync_to_async
from django.db import connection, transaction

from agents.memory.scopes import Reach
from agents.models import Fact
from tools.runtime.routing import TextEmbedder

logger = logging.getLogger(__name__)

RRF_K = 60
# The full-text list's weight in the fusion beside the vector list's 1.0: its stemmed OR-ed
# words ("living" finds "Lives in Austin") are the noisier list. Chosen on
# tests/data/memory/recall.json (37 queries): 0.3 to 0.7 rank alike; 1.0 puts one more
# wrong fact first with either model; 0 (vectors alone) puts two fewer with MiniLM but
# loses recall@3 and @5 with the static model (0.82 and 0.88 against 0.87 and 0.92),
# and would leave a name or a rare word to the model's idea of it.
LEXICAL_WEIGHT = 0.5
CANDIDATES = 50  # from each list, before fusion
EMBED_PER_RECALL = 100

_embedder: list[TextEmbedder] = []  # the one registered, if any


def register_fact_embedder(embedder: TextEmbedder | None) -> None:
    """Embed facts and recall queries with `embedder` (one text at a time, mostly); None:
    recall by words only. Facts embedded by another model are embedded again by recall."""
    _embedder[:] = [embedder] if embedder is not None else []


def fact_embedder() -> TextEmbedder | None:
    return _embedder[0] if _embedder else None


async def embedded(texts: list[str]) -> tuple[str, list[list[float]]] | None:
    """The texts' vectors and the model's name; None without a model or when it failed
    (logged): words still recall."""
    embedder = fact_embedder()
    if embedder is None:
        return None
    try:
        return embedder.name, await embedder.embed(texts)
    except Exception:
        logger.warning("embedding facts with %s failed", embedder.name, exc_info=True)
        return None


async def recall(reach: Reach, query: str, limit: int) -> list[dict[str, str]]:
    """The reachable facts closest to `query` by meaning or words, best first (at most
    `limit`); without a query, the latest. See the module for the cost."""
    query = query.strip()[:1000]
    if not query:
        rows = await sync_to_async(list)(
            Fact.objects.filter(reach.q()).order_by("-id").values_list("pk", "text")[:limit]
        )
        return [{"id": str(pk), "text": text} for pk, text in rows]
    name, vector = None, None
    if fact_embedder() is not None:
        await _embed_missing(reach)
        found = await embedded([query])
        if found is not None and found[1]:
            name, vector = found[0], found[1][0]
    rows = await sync_to_async(_ranked)(reach, query, name, vector, limit)
    return [{"id": str(pk), "text": text} for pk, text in rows]


async def _embed_missing(reach: Reach) -> None:
    """Embed the newest reachable facts that have no vector of the registered model (at
    most EMBED_PER_RECALL): one query, plus one embedding call and one update when some
    have none. A fact edited meanwhile keeps no vector of its old text."""
    embedder = fact_embedder()
    if embedder is None:
        return
    missing = await sync_to_async(list)(
        Fact.objects.filter(reach.q())
        .exclude(embedder=embedder.name)
        .order_by("-id")
        .values_list("pk", "text")[:EMBED_PER_RECALL]
    )
    if not missing:
        return
    found = await embedded([text for _, text in missing])
    if found is not None:
        await sync_to_async(store_vectors)(found[0], missing, found[1])


def store_vectors(name: str, facts: list[tuple[int, str]], vectors: list[list[float]]) -> None:
    """Each fact's vector, unless its text changed since it was read."""
    values = ", ".join(["(%s, %s, %s::vector)"] * len(facts))
    params: list = [name]
    for (pk, text), vector in zip(facts, vectors, strict=True):
        params += [pk, text, _vector_literal(vector)]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE agents_fact f SET embedding = v.embedding, embedder = %s
            FROM (VALUES {values}) AS v(id, text, embedding)
            WHERE f.id = v.id AND f.text = v.text
            """,  # noqa: S608 (only placeholders are joined in)
            params,
        )


# The query's words (stemmed, stop words left out) OR-ed: a fact need not hold all of them.
_TSQUERY = "replace(plainto_tsquery('english', %(query)s)::text, ' & ', ' | ')::tsquery"
_LEXICAL = f"""
    lexical AS (
        SELECT f.id, row_number() OVER (
            ORDER BY ts_rank_cd(f.search, q.query, 1) DESC, f.id DESC
        ) AS rank
        FROM agents_fact f, (SELECT {_TSQUERY} AS query) q
        WHERE {{reach}} AND f.search @@ q.query
        ORDER BY rank LIMIT %(candidates)s
    )"""  # noqa: S608 (constant fragments)
_SEMANTIC = """
    semantic AS (
        SELECT f.id, row_number() OVER (
            ORDER BY f.embedding <=> %(vector)s::vector, f.id DESC
        ) AS rank
        FROM agents_fact f
        WHERE {reach} AND f.embedder = %(embedder)s
        ORDER BY rank LIMIT %(candidates)s
    )"""
_FUSED = """
    SELECT f.id, f.text FROM (
        SELECT id, sum(score) AS score FROM ({lists}) ranked GROUP BY id
    ) fused JOIN agents_fact f ON f.id = fused.id
    WHERE {reach}
    ORDER BY fused.score DESC, f.id DESC
    LIMIT %(limit)s"""


def _ranked(
    reach: Reach, query: str, embedder: str | None, vector: Sequence[float] | None, limit: int
) -> list[tuple[int, str]]:
    """One statement: the full-text and vector lists of the reachable facts, fused
    (reciprocal rank fusion, k = RRF_K); the full-text list alone without a vector."""
    where, params = reach.sql("f")
    params |= {
        "query": query,
        "candidates": CANDIDATES,
        "limit": limit,
        "lexical_weight": LEXICAL_WEIGHT,
        "k": RRF_K,
    }
    lists = ["SELECT id, %(lexical_weight)s / (%(k)s + rank) AS score FROM lexical"]
    ctes = [_LEXICAL.format(reach=where)]
    if vector is not None:
        params |= {"vector": _vector_literal(vector), "embedder": embedder}
        ctes.append(_SEMANTIC.format(reach=where))
        lists.append("SELECT id, 1.0 / (%(k)s + rank) AS score FROM semantic")
    sql = "WITH" + ",".join(ctes) + _FUSED.format(lists=" UNION ALL ".join(lists), reach=where)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"
