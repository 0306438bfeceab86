"""A knowledge base's provider embeddings held against the quotas (agents.quotas): each
ingestion batch for the tenant, each search for whoever searches (a run's `knowledge_search`
for the run); settled to the provider's count and recorded as runs of the model, so the
counters and the records agree. A refusal fails the document, is an error result plus
`tool.quota_exceeded` in a run, and a 429 over REST."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from agents import quotas
from agents.models import Quota, Run, RunEvent
from agents.runs import run_inline
from providers.models import ModelPrice
from rag.ingestion import ingest
from rag.models import DocumentStatus
from rag.services import document_add
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.rag.conftest import provider_kb

pytestmark = pytest.mark.django_db(transaction=True)

EMBEDDINGS = "/v1/embeddings"
TEXT = "# Leave\n\nEvery employee gets 27 days of paid leave a year, plus public holidays."
RECORDED = "embeddings-docs/text-embedding-3-small"  # `<connection handle>/<model>`


@pytest.fixture(autouse=True)
def _ingested_here_only(monkeypatch):
    """The tests ingest in-process: the session's Celery worker (when a test before started
    one) must not ingest the same document too, counting its tokens twice."""
    from rag import tasks

    monkeypatch.setattr(tasks.ingest_document, "delay", lambda *args: None)


def _limit(tenant, limit, **fields) -> Quota:
    fields = {"scope": "tenant", "metric": "tokens", "period": "day", **fields}
    return Quota.objects.create(tenant=tenant, limit=limit, **fields)


def _expensive_embeddings(tenant) -> None:
    """$10,000 per million tokens: a few tokens cost cents (the chat model costs nothing)."""
    ModelPrice.objects.create(
        tenant=tenant, provider_kind="openai", model="text-embedding-3-small",
        input_price=Decimal("10000"), output_price=Decimal(0),
        cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip


def _ingested(tenant, provider_server):
    kb = provider_kb(tenant, provider_server.openai_base_url)
    document = document_add(tenant=tenant, knowledge_base=kb, title="Handbook", text=TEXT)
    ingest(document.pk)
    document.refresh_from_db()
    return kb, document


def test_ingestion_is_held_settled_and_recorded_for_the_tenant(trio, provider_server):
    _expensive_embeddings(trio.acme)
    tokens = _limit(trio.acme, 100_000)
    dollars = _limit(trio.acme, Decimal("10"), metric="cost", period="month")
    _, document = _ingested(trio.acme, provider_server)
    assert document.status == DocumentStatus.READY, document.error
    [recorded] = Run.objects.filter(gateway_model=RECORDED)
    assert recorded.initiated_by_user is None and recorded.status == "succeeded"
    assert quotas.used(tokens) == recorded.input_tokens > 0
    assert Decimal(str(quotas.used(dollars))) == recorded.cost_usd > 0


def test_a_used_up_limit_fails_the_ingestion_naming_it(trio, provider_server):
    _limit(trio.acme, 0)
    _, document = _ingested(trio.acme, provider_server)
    assert document.status == DocumentStatus.FAILED
    assert document.error.startswith(
        "Quota exceeded: the daily limit of 0 tokens for the tenant is used up"
    )
    assert provider_server.requests_to(EMBEDDINGS) == []
    assert not Run.objects.filter(gateway_model=RECORDED).exists()


def test_a_runs_search_is_refused_as_an_error_result_and_an_event(trio, agent, provider_server):
    kb, _ = _ingested(trio.acme, provider_server)
    kb.agents.add(agent)
    _expensive_embeddings(trio.acme)  # (after the ingestion: a search's few tokens cost cents)
    _limit(trio.acme, Decimal("0.01"), scope="member", user=trio.bob, metric="cost")
    embedded = len(provider_server.requests_to(EMBEDDINGS))
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("k1", "knowledge_search", json.dumps({"query": "leave"}))]),
        TextReply("I could not search."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="Leave?", initiated_by=trio.bob)
    assert run.status == "succeeded", run.error  # (the chat model has no price: it fits)
    assert len(provider_server.requests_to(EMBEDDINGS)) == embedded  # never asked
    [refused] = RunEvent.objects.filter(run=run, type="tool.quota_exceeded")
    message = refused.payload["message"]
    assert message.startswith(
        "Quota exceeded: the daily limit of $0.01 for member bob cannot take this call"
    )
    assert refused.payload["name"] == "knowledge_search" and refused.payload["scope"] == "member"
    [completed] = RunEvent.objects.filter(run=run, type="tool.completed")
    assert completed.payload["error"] == message


def test_a_search_over_rest_is_refused_with_429_for_its_caller(trio, provider_server):
    kb, _ = _ingested(trio.acme, provider_server)
    _limit(trio.acme, 0, scope="member", user=trio.bob)
    api = APIClient()
    api.force_login(trio.bob)
    api.credentials(HTTP_X_TENANT="acme")
    url = f"/api/v1/knowledge-bases/{kb.slug}/search"
    response = api.post(url, {"query": "leave", "mode": "vector"}, format="json")
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded" and error["details"]["scope"] == "member"
    assert int(response["Retry-After"]) > 0
    # alice has no limit of her own: her search is held, settled and recorded for her.
    api.force_login(trio.alice)
    response = api.post(url, {"query": "leave", "mode": "vector"}, format="json")
    assert response.status_code == 200, response.json()
    assert Run.objects.filter(gateway_model=RECORDED, initiated_by_user=trio.alice).count() == 1
