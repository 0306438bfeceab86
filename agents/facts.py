"""The memory tools' store (Fact rows, always filtered by tenant and user first), and memory
as a tool source: an `agentplatform.tool_sources` plug-in (pyproject.toml) that gives an
agent whose `memory` is on the tools to remember, recall and forget facts about its user.

Recall is hybrid, as knowledge-base search is (rag/search.py): the user's facts ranked by
full text (any of the query's words, stemmed: `ts_rank_cd` over OR-ed terms) and by the
cosine distance of their vectors to the query's, the two lists fused by reciprocal rank.
Vectors come from the embedder an app registers (`register_fact_embedder`: rag registers
its local model; agents never import rag); without one, or when it fails, recall is by
words only. A fact is embedded when remembered; facts without a vector of the current
model (remembered before recall was hybrid, when the model failed, under another model,
or edited in the admin) are embedded by their user's next recall, at most
EMBED_PER_RECALL a call.

Cost of a recall with a query: one embedding of the query (on the CPU: about a millisecond
with the static model, several with MiniLM), one query finding the user's facts without a
vector, and one statement ranking: an exact scan of the user's facts (a B-tree index on
tenant and user; one distance per fact, one text match per fact), linear in the user's
facts: about 2 ms of PostgreSQL's time at 1,000 facts. bench/memory.py prints the whole
recall's p50 and p99. No approximate index: a user's facts are few, and exact is exact.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from asgiref.sync import sync_to_async
from django.db import connection, transaction

from agents.models import Agent, Fact
from agents.runtime.memory import MEMORY_TOOL_NAMES, memory_tools
from tools.runtime.routing import TextEmbedder
from tools.runtime.tool import Tool

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


class DjangoFactStore:
    """Facts in PostgreSQL; a fact remembers the run that learnt it (the RunContext's)."""

    async def remember(self, *, tenant_id, user_id, text, run_id) -> str:
        """One embedding (outside any transaction) and one insert."""
        source = int(run_id) if run_id is not None and str(run_id).isdigit() else None
        embedder = fact_embedder()
        vector = await _embedded(embedder, [text]) if embedder is not None else None
        fact = await Fact.objects.acreate(
            tenant_id=tenant_id,
            user_id=user_id,
            text=text,
            source_run_id=source,
            embedding=vector[0] if vector else None,
            embedder=embedder.name if vector else "",
        )
        return str(fact.pk)

    async def recall(self, *, tenant_id, user_id, query, limit) -> list[dict[str, str]]:
        """The user's facts closest to `query` by meaning or words, best first (at most
        `limit`); without a query, the latest. See the module for the cost."""
        query = query.strip()[:1000]
        if not query:
            rows = await sync_to_async(list)(
                Fact.objects.filter(tenant_id=tenant_id, user_id=user_id)
                .order_by("-id")
                .values_list("pk", "text")[:limit]
            )
            return [{"id": str(pk), "text": text} for pk, text in rows]
        embedder = fact_embedder()
        vector = None
        if embedder is not None:
            await _embed_missing(tenant_id, user_id, embedder)
            vectors = await _embedded(embedder, [query])
            vector = vectors[0] if vectors else None
        name = embedder.name if embedder is not None and vector is not None else None
        rows = await sync_to_async(_ranked)(tenant_id, user_id, query, name, vector, limit)
        return [{"id": str(pk), "text": text} for pk, text in rows]

    async def forget(self, *, tenant_id, user_id, fact_id) -> bool:
        if not str(fact_id).isdigit():
            return False
        deleted, _ = await Fact.objects.filter(
            pk=int(fact_id), tenant_id=tenant_id, user_id=user_id
        ).adelete()
        return bool(deleted)


async def _embedded(embedder: TextEmbedder, texts: list[str]) -> list[list[float]] | None:
    """The texts' vectors, or None when the model failed (logged): words still recall."""
    try:
        return await embedder.embed(texts)
    except Exception:
        logger.warning("embedding facts with %s failed", embedder.name, exc_info=True)
        return None


async def _embed_missing(tenant_id, user_id, embedder: TextEmbedder) -> None:
    """Embed the user's newest facts that have no vector of `embedder` (at most
    EMBED_PER_RECALL): one query, plus one embedding call and one update when some have
    none. A fact edited meanwhile keeps no vector of its old text."""
    missing = await sync_to_async(list)(
        Fact.objects.filter(tenant_id=tenant_id, user_id=user_id)
        .exclude(embedder=embedder.name)
        .order_by("-id")
        .values_list("pk", "text")[:EMBED_PER_RECALL]
    )
    if not missing:
        return
    vectors = await _embedded(embedder, [text for _, text in missing])
    if vectors is None:
        return
    await sync_to_async(_store_vectors)(embedder.name, missing, vectors)


def _store_vectors(name: str, facts: list[tuple[int, str]], vectors: list[list[float]]) -> None:
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
        WHERE f.tenant_id = %(tenant)s AND f.user_id = %(user)s AND f.search @@ q.query
        ORDER BY rank LIMIT %(candidates)s
    )"""  # noqa: S608 (a constant fragment)
_SEMANTIC = """
    semantic AS (
        SELECT f.id, row_number() OVER (
            ORDER BY f.embedding <=> %(vector)s::vector, f.id DESC
        ) AS rank
        FROM agents_fact f
        WHERE f.tenant_id = %(tenant)s AND f.user_id = %(user)s AND f.embedder = %(embedder)s
        ORDER BY rank LIMIT %(candidates)s
    )"""
_FUSED = """
    SELECT f.id, f.text FROM (
        SELECT id, sum(score) AS score FROM ({lists}) ranked GROUP BY id
    ) fused JOIN agents_fact f ON f.id = fused.id
    WHERE f.tenant_id = %(tenant)s AND f.user_id = %(user)s
    ORDER BY fused.score DESC, f.id DESC
    LIMIT %(limit)s"""


def _ranked(
    tenant_id, user_id, query: str, embedder: str | None, vector: Sequence[float] | None, limit
) -> list[tuple[int, str]]:
    """One statement: the full-text and vector lists of the user's facts, fused (reciprocal
    rank fusion, k = RRF_K); the full-text list alone without a vector."""
    params = {
        "tenant": tenant_id,
        "user": user_id,
        "query": query,
        "candidates": CANDIDATES,
        "limit": limit,
        "lexical_weight": LEXICAL_WEIGHT,
        "k": RRF_K,
    }
    lists = ["SELECT id, %(lexical_weight)s / (%(k)s + rank) AS score FROM lexical"]
    ctes = [_LEXICAL]
    if vector is not None:
        params |= {"vector": _vector_literal(vector), "embedder": embedder}
        ctes.append(_SEMANTIC)
        lists.append("SELECT id, 1.0 / (%(k)s + rank) AS score FROM semantic")
    sql = "WITH" + ",".join(ctes) + _FUSED.format(lists=" UNION ALL ".join(lists))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


_MEMORY_TOOLS = memory_tools(DjangoFactStore())  # the store keeps nothing per run: share them


def memory_tools_for_agent(agent: Agent) -> list[Tool]:
    """The memory tools, for an agent that remembers (its `memory` setting), in runs that
    have a user (`needs_user`): facts are a user's, and a key's run acting for no member
    has none — one memory for every end user of a key would show each the others' facts."""
    return list(_MEMORY_TOOLS) if agent.memory else []


memory_tools_for_agent.label = "memory"  # type: ignore[attr-defined]
memory_tools_for_agent.tool_names = MEMORY_TOOL_NAMES  # type: ignore[attr-defined]
memory_tools_for_agent.needs_user = True  # type: ignore[attr-defined]
