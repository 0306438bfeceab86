"""A configuration dry run is the import, rolled back (agents/config_document.py,
`config_import`): it refuses exactly what the import refuses, at the same paths, for every
document of the suite's corpus (tests/agents/config_corpus.py), and leaves no trace. The
faces (REST, the command, the page) call this one service; each is tested once in its own
module (tests/api/test_config_api.py, tests/test_config_command.py,
tests/web/test_config_document.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from celery import signals

from agents import quotas
from agents.config_document import config_export, config_import
from agents.models import Quota, Trigger
from base import versions
from providers import pricing
from rag.models import Document, KnowledgeBase
from tenancy import api_keys
from tenancy.models import AuditEntry, ConfigVersion
from tests.agents.config_corpus import CORPUS, BadDocument, secret_holders
from tests.factories import make_agent, make_http_tool
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db


def refusals(plan) -> list[tuple[str, str]]:
    return [(problem.path, problem.reason) for problem in plan.problems]


def version_keys(tenant_id: int) -> list[str]:
    """The Redis versions a configuration change moves (the configuration's, agents.quotas,
    providers.pricing, the API keys')."""
    return [
        versions._config_key(tenant_id),
        quotas._version_key(tenant_id),
        pricing._version_key(tenant_id),
        api_keys._VERSION_KEY,
    ]


def stored_versions(tenant_id: int) -> dict[str, str]:
    """The versions as stored in Redis (read there, not from this process's mirror); made
    first where missing, as any process reading one does."""
    client = versions.shared_redis(decode=True)
    keys = version_keys(tenant_id)
    for key in keys:
        versions.current(key)
    return {key: client.get(key) for key in keys}


def traces(tenant) -> tuple[Any, ...]:
    """What an import leaves: the document, the audit log, the history (in the database)
    and the versions of what processes build from the configuration (in Redis)."""
    return (
        config_export(tenant=tenant),
        AuditEntry.objects.filter(tenant=tenant).count(),
        ConfigVersion.objects.filter(tenant=tenant).count(),
        stored_versions(tenant.pk),
    )


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
def test_a_dry_run_refuses_what_the_import_refuses_at_the_same_paths(trio, case: BadDocument):
    case.setup(trio)
    acme = trio.acme
    text = case.document(trio)
    given = {"tenant": acme, "text": text, "format": case.format, "prune": case.prune}
    before = traces(acme)

    dry = config_import(**given, dry_run=True, by=case.by(trio))
    assert not dry.valid and not dry.applied
    assert set(case.paths) <= {path for path, _ in refusals(dry)}, refusals(dry)
    assert traces(acme) == before

    imported = config_import(**given, by=case.by(trio))
    assert refusals(imported) == refusals(dry)
    assert not imported.applied and traces(acme) == before


def test_a_secret_moved_with_its_url_is_refused_by_the_dry_run_and_kept(trio):
    """The case that started it: the dry run passed, the import refused."""
    secret_holders(trio)
    data = config_export(tenant=trio.acme)
    data["tools"][0]["config"]["url"] = "https://evil.test/lookup"
    plan = config_import(tenant=trio.acme, text=json.dumps(data), dry_run=True)
    assert refusals(plan) == [
        ("tools[0].secret", "The URL's host changed: enter the secret again, or clear it.")
    ]
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="lookup")
    assert tool.config["url"] == "https://api.example.com/lookup" and tool.secret
    # Cleared in the same document, the move is allowed: the dry run says so too.
    data["tools"][0]["secret"] = None
    del data["tools"][0]["config"]["auth"]
    plan = config_import(tenant=trio.acme, text=json.dumps(data), dry_run=True)
    assert plan.valid and [(c.section, c.name) for c in plan.changes] == [("tools", "lookup")]
    assert ToolDefinition.objects.get(pk=tool.pk).secret


# -- no trace ----------------------------------------------------------------------------------
@pytest.fixture
def published() -> list[tuple[str, Any]]:
    """Every Celery task sent to the broker meanwhile: (name, args)."""
    sent: list[tuple[str, Any]] = []

    def record(sender=None, headers=None, body=None, **kwargs) -> None:
        sent.append((sender, tuple(body[0]) if body else None))

    signals.before_task_publish.connect(record, weak=False)
    yield sent
    signals.before_task_publish.disconnect(record)


@pytest.mark.django_db(transaction=True)
def test_a_dry_run_leaves_no_trace_where_the_import_leaves_them(trio, published):
    """Committed for real (a transactional test): what a dry run would send after commit
    would be sent, so what it leaves is what it would leave in production."""
    acme = trio.acme
    make_agent(acme, "support")
    make_http_tool(acme, "lookup", "https://api.example.com/lookup")
    kb = KnowledgeBase.objects.create(tenant=acme, slug="handbook", name="Handbook")
    document = Document.objects.create(tenant=acme, knowledge_base=kb, title="Doc", source="text")
    data = config_export(tenant=acme)
    data["policy"]["time_zone"] = "Europe/Lisbon"  # the tenant's own row
    data["tools"][0]["description"] = "Look it up."
    data["knowledge_bases"][0]["chunk_size"] = 500  # its documents are embedded again
    data["prices"] = [{"provider": "openai", "model": "gpt-4o", "input": 1, "output": 2,
                       "cached_input": 0.5, "cache_write": 1}]  # fmt: skip
    data["quotas"] = [{"scope": "tenant", "metric": "tokens", "period": "day", "limit": 9}]
    data["triggers"] = [{"name": "hook", "kind": "webhook", "agent": "support",
                         "run_as": "alice", "input_template": "Go"}]  # fmt: skip
    text = json.dumps(data)
    before = traces(acme)

    dry = config_import(tenant=acme, text=text, dry_run=True)
    assert dry.valid and not dry.applied and len(dry.changes) == 6, dry.as_dict()
    assert dry.new_secrets == []
    assert traces(acme) == before
    assert published == []
    assert acme.time_zone == "UTC"  # the caller's object too
    assert not Trigger.objects.exists() and not Quota.objects.exists()

    # The same document imported leaves each of them: the checks above could see them.
    applied = config_import(tenant=acme, text=text)
    assert applied.applied and len(applied.new_secrets) == 1
    export, audited, history, moved = traces(acme)
    assert export != before[0] and export["policy"]["time_zone"] == "Europe/Lisbon"
    assert audited > before[1] and history > before[2]
    assert all(moved[key] != before[3][key] for key in moved), (before[3], moved)
    assert ("rag.ingest_document", (document.pk, True)) in published
