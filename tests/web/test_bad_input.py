"""Hostile input on every web page and admin changelist: a NUL character is refused with a
400 and a clear message before any view runs (nothing changes); other odd values
(overlong, lone surrogates, non-numeric or out-of-range ids, NaN) never give a 5xx."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.db import models
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from agents.conversations import attachment_upload
from agents.evaluations import case_save, dataset_save, evaluation_start
from agents.models import (
    Agent,
    AgentDraft,
    Approval,
    Attachment,
    Conversation,
    Crew,
    Fact,
    Message,
    Quota,
    Run,
    WorkflowDefinition,
)
from agents.services import agent_save, conversation_save
from agents.triggers import trigger_save
from providers.models import ModelAlias, ModelPrice, ProviderConnection
from rag import services as rag_services
from rag.ingestion import ingest
from rag.models import Document, KnowledgeBase
from tenancy import services as tenancy
from tenancy.models import ApiKey, Membership
from tenancy.policy import Principal
from tests.conftest import Trio, make_trio
from tests.factories import (
    login,
    make_agent,
    make_approval,
    make_connection,
    make_crew,
    make_http_tool,
    make_mcp_connection,
)
from tests.module_data import forget_redis_state, module_rows
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db

NUL = "%00"
# Percent-encoded as they travel; Django decodes them.
# (Not "abc": the overlong value is as unparseable a number; nor "%FF%FE": it reaches a view
# as the lone surrogate does, U+FFFD replacement characters.)
ODD_VALUES = [
    "x" * 20_000,  # overlong, and no number
    "%ED%A0%80",  # a lone surrogate (UTF-16 high half) encoded as UTF-8: not UTF-8 at all
    "99999999999999999999",  # beyond a 64-bit integer
    "-1",
    "nan",  # not a number where an id is expected; a float() that parses
    "inf",
]
# Parameters the views read from query strings, besides the fields of their forms.
COMMON_NAMES = [
    "q",
    "page",
    "days",
    "agent",
    "crew",
    "after",
    "current",
    "status",
    "query",
    "at",
    "tip",
]
DESTRUCTIVE = ("delete", "revoke", "remove", "cancel")


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    """The trio and `world`'s objects, made once for the module's ~20 tests (each walks every
    page; the objects cost about a third of a second each time)."""
    with module_rows(django_db_blocker, lambda: _make_world(make_trio())) as made:
        yield made


@pytest.fixture
def trio(module_world, db) -> Trio:
    """The module's trio, its rows as made: what a test writes is rolled back after it."""
    trio = module_world[0]
    forget_redis_state([trio.acme.pk, trio.globex.pk])
    return trio


@pytest.fixture
def world(module_world, trio) -> dict:
    return module_world[1]


def _make_world(trio: Trio) -> tuple[Trio, dict]:
    """One of each object in acme, alice's where ownership matters; no network needed."""
    connection = make_connection(trio.acme, is_default=True)
    agent = make_agent(trio.acme, "helper")
    agent = agent_save(tenant=trio.acme, agent=agent, changes={"description": "Helps."})  # v1
    crew = make_crew(trio.acme, "team", [agent])
    tool = make_http_tool(
        trio.acme, "lookup", "https://api.example.com/lookup", description="Look something up."
    )
    key = ApiKey.objects.create(
        tenant=trio.acme, name="CI", prefix="ap_test1", secret_hash="0" * 64, scopes=["read"]
    )
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Plans"}, owner_user=trio.alice
    )
    run = Run.objects.create(
        tenant=trio.acme,
        agent=agent,
        conversation=chat,
        initiated_by_user=trio.alice,
        status="awaiting_approval",
        correlation_id="c0ffee",
    )
    approval = make_approval(run, "transfer", arguments={"amount": 5})
    message = Message.objects.create(
        tenant=trio.acme, conversation=chat, role="user", content="Plans?", run=run
    )
    attachment = attachment_upload(
        tenant=trio.acme, conversation=chat, by=trio.alice, name="notes.txt", data=b"Notes."
    )
    handbook = rag_services.knowledge_base_save(
        tenant=trio.acme, changes={"slug": "handbook", "name": "Handbook", "embedder": "lexical"}
    )
    document = rag_services.document_add(
        tenant=trio.acme, knowledge_base=handbook, title="Holidays", text="We rest in August."
    )
    assert ingest(document.pk) == "ready"
    dataset = dataset_save(tenant=trio.acme, changes={"name": "cases"})
    case = case_save(
        tenant=trio.acme, dataset=dataset, changes={"input": "hi", "expect": {"contains": "x"}}
    )
    evaluation = evaluation_start(
        tenant=trio.acme, dataset=dataset, agent=agent, by=trio.alice, dispatch=False
    )
    draft = AgentDraft.objects.create(
        tenant=trio.acme, agent=agent, fields={"instructions": "x"}, status="failed"
    )
    crew_draft = AgentDraft.objects.create(
        tenant=trio.acme, crew=crew, fields={"max_depth": 2}, status="failed"
    )
    return trio, {
        "fact": Fact.objects.create(tenant=trio.acme, user=trio.alice, text="Likes tea."),
        "dataset": dataset,
        "case": case,
        "evaluation": evaluation,
        "draft": draft,
        "crew_draft": crew_draft,
        "connection": connection,
        "mcp": make_mcp_connection(trio.acme, "http://127.0.0.1:9/mcp", "crm", timeout_s=2),
        "agent": agent,
        "crew": crew,
        "workflow": WorkflowDefinition.objects.create(
            tenant=trio.acme,
            slug="flow",
            name="Flow",
            definition={"steps": [{"id": "a", "transform": "input"}]},
        ),
        "tool": tool,
        "key": key,
        "chat": chat,
        "message": message,
        "attachment": attachment,
        "run": run,
        "approval": approval,
        "handbook": handbook,
        "document": document,
        "membership": Membership.objects.get(tenant=trio.acme, user=trio.bob),
        "group": tenancy.group_create(tenant=trio.acme, name="Finance"),
        "price": ModelPrice.objects.create(
            tenant=trio.acme,
            provider_kind="openai",
            model="gpt-4o",
            input_price=1,
            output_price=1,
            cached_input_price=1,
            cache_write_price=1,
        ),
        "trigger": trigger_save(
            tenant=trio.acme,
            by=Principal.of_membership(Membership.objects.get(tenant=trio.acme, user=trio.alice)),
            changes={"name": "hook", "kind": "webhook", "agent": agent, "input_template": "x"},
        ).trigger,
        "alias": ModelAlias.objects.create(
            tenant=trio.acme,
            name="chat",
            targets=[{"connection": connection.name, "model": "gpt-4o-mini"}],
        ),
        "quota": Quota.objects.create(
            tenant=trio.acme, scope="tenant", metric="tokens", period="month", limit=10**9
        ),
        "invitation": tenancy.invitation_create(
            tenant=trio.acme, invitee="dora@example.test", role="member", invited_by=trio.alice
        )[0],
    }


def _tenant_url_names() -> set[str]:
    names: set[str] = set()

    def walk(patterns, prefix: str, namespace: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                walk(entry.url_patterns, route, inner)
            elif isinstance(entry, URLPattern) and "<slug:tenant_slug>" in route:
                names.add(namespace + entry.name)

    walk(get_resolver().url_patterns, "", "")
    return names


def every_url(world) -> list[str]:
    """Every tenant page with acme's ids; a page missing here fails the test below."""
    chat, run, approval = world["chat"].pk, world["run"].pk, world["approval"].pk
    slug, doc = world["handbook"].slug, world["document"].pk
    kwargs = {
        "tenant_home": {},
        "chat:index": {},
        "chat:new": {},
        "chat:conversation": {"conversation_id": chat},
        "chat:send": {"conversation_id": chat},
        "chat:regenerate": {"conversation_id": chat},
        "chat:rename": {"conversation_id": chat},
        "chat:edit_message": {"conversation_id": chat, "message_id": world["message"].pk},
        "chat:switch": {"conversation_id": chat},
        "chat:fork": {"conversation_id": chat},
        "chat:stream": {"conversation_id": chat, "run_id": run},
        "chat:decide": {"conversation_id": chat, "approval_id": approval},
        "chat:source": {"document_id": doc},
        "chat:attach": {"conversation_id": chat},
        "chat:attachment": {"conversation_id": chat, "attachment_id": world["attachment"].pk},
        "chat:attachment_chip": {"conversation_id": chat, "attachment_id": world["attachment"].pk},
        "activity:runs": {},
        "activity:run": {"run_id": run},
        "activity:run_verify": {"run_id": run},
        "activity:run_resume": {"run_id": run},
        "activity:approvals": {},
        "activity:approval_decide": {"approval_id": approval},
        "activity:usage": {},
        "activity:usage_export": {},
        "config:prices": {},
        "config:price_create": {},
        "config:price_edit": {"pk": world["price"].pk},
        "config:quotas": {},
        "config:quota_time_zone": {},
        "config:retention": {},
        "config:retention_holds": {},
        "config:retention_hold_lift": {"conversation": world["chat"].pk},
        "config:model_alias_create": {},
        "config:model_alias_edit": {"pk": world["alias"].pk},
        "config:quota_edit": {"pk": world["quota"].pk},
        "config:agents": {},
        "config:agent_create": {},
        "config:agent_tools": {},
        "config:agent_edit": {"slug": world["agent"].slug},
        "config:agent_draft_publish": {"slug": world["agent"].slug, "draft_id": world["draft"].pk},
        "config:agent_draft_discard": {"slug": world["agent"].slug, "draft_id": world["draft"].pk},
        "config:crew_draft_publish": {
            "slug": world["crew"].slug,
            "draft_id": world["crew_draft"].pk,
        },
        "config:crew_draft_discard": {
            "slug": world["crew"].slug,
            "draft_id": world["crew_draft"].pk,
        },
        "config:crews": {},
        "config:crew_create": {},
        "config:crew_edit": {"slug": world["crew"].slug},
        "config:workflows": {},
        "config:workflow_create": {},
        "config:workflow_edit": {"slug": world["workflow"].slug},
        "config:tools": {},
        "config:skills": {},
        "config:skill_approve": {"name": "pdf-forms", "number": 1},
        "config:tool_create": {},
        "config:tool_edit": {"pk": world["tool"].pk},
        "config:tool_try": {"name": "calculator"},
        "config:tool_selftest": {"name": "calculator"},
        "config:tool_import": {},
        "config:tool_import_curl": {},
        "config:tool_dry_call": {},
        "config:tool_edit_dry_call": {"pk": world["tool"].pk},
        "config:connections": {},
        "config:connection_create": {},
        "config:connection_edit": {"pk": world["connection"].pk},
        "config:connection_test": {"pk": world["connection"].pk},
        "config:mcp_connections": {},
        "config:mcp_connection_create": {},
        "config:mcp_connection_edit": {"pk": world["mcp"].pk},
        "config:mcp_connection_test": {"pk": world["mcp"].pk},
        "config:mcp_connection_refresh": {"pk": world["mcp"].pk},
        "config:mcp_connection_connect": {"pk": world["mcp"].pk},
        "config:mcp_connection_disconnect": {"pk": world["mcp"].pk},
        "mcp_accounts": {},
        "mcp_account_connect": {"pk": world["mcp"].pk},
        "mcp_account_disconnect": {"pk": world["mcp"].pk},
        "config:document": {},
        "config:document_download": {},
        "config:api_keys": {},
        "config:api_key_create": {},
        "config:members": {},
        "config:member_invite": {},
        "config:groups": {},
        "config:group_members": {"pk": world["group"].pk},
        "config:agent_grants": {"slug": world["agent"].slug},
        "config:crew_grants": {"slug": world["crew"].slug},
        "activity:audit": {},
        "config:member_role": {"pk": world["membership"].pk},
        "config:member_sign_in": {},
        "config:history": {"kind": "agents", "pk": world["agent"].pk},
        "config:history_version": {"kind": "agents", "pk": world["agent"].pk, "number": 1},
        "config:history_restore": {"kind": "agents", "pk": world["agent"].pk, "number": 1},
        "config:triggers": {},
        "config:trigger_create": {},
        "config:trigger": {"pk": world["trigger"].pk},
        "config:trigger_edit": {"pk": world["trigger"].pk},
        "config:trigger_enabled": {"pk": world["trigger"].pk},
        "config:trigger_rotate": {"pk": world["trigger"].pk},
        "knowledge:index": {},
        "knowledge:create": {},
        "knowledge:edit": {"slug": slug},
        "knowledge:documents": {"slug": slug},
        "knowledge:document_add": {"slug": slug},
        "knowledge:document_reingest": {"slug": slug, "pk": doc},
        "knowledge:search": {"slug": slug},
        "activity:datasets": {},
        "activity:dataset_create": {},
        "activity:dataset": {"dataset_id": world["dataset"].pk},
        "activity:dataset_edit": {"dataset_id": world["dataset"].pk},
        "activity:case_create": {"dataset_id": world["dataset"].pk},
        "activity:case_edit": {"dataset_id": world["dataset"].pk, "case_id": world["case"].pk},
        "activity:evaluations": {},
        "activity:evaluation_create": {},
        "activity:evaluation": {"evaluation_id": world["evaluation"].pk},
        "activity:evaluation_compare": {"evaluation_id": world["evaluation"].pk},
        "activity:run_feedback": {"run_id": run},
        "activity:run_to_dataset": {"run_id": run},
        "memory": {},
        "fact_edit": {"fact_id": world["fact"].pk},
        "my_data": {},
        "my_data_download": {},
        "tenant_erasure": {},  # (odd values: no request made)
        "tenant_export": {},  # (odd values: an export asked for; no worker runs it here)
        "tenant_export_download": {},  # (none ready: 404)
        "person_erasure": {"user_id": world["membership"].user_id},  # (odd: nothing erased)
        # Destructive ones last, so the others still find their objects.
        "chat:cancel": {"conversation_id": chat, "run_id": run},
        "chat:resume": {"conversation_id": chat, "run_id": run},
        "chat:detach": {"conversation_id": chat, "attachment_id": world["attachment"].pk},
        "chat:delete": {"conversation_id": chat},
        "chat:steer": {"conversation_id": chat},
        "chat:unqueue": {"conversation_id": chat, "queued_id": 999999},
        "config:agent_delete": {"slug": world["agent"].slug},
        "config:crew_delete": {"slug": world["crew"].slug},
        "config:workflow_delete": {"slug": world["workflow"].slug},
        "config:tool_delete": {"pk": world["tool"].pk},
        "config:connection_delete": {"pk": world["connection"].pk},
        "config:price_delete": {"pk": world["price"].pk},
        "config:trigger_delete": {"pk": world["trigger"].pk},
        "config:quota_delete": {"pk": world["quota"].pk},
        "config:model_alias_delete": {"pk": world["alias"].pk},
        "config:mcp_connection_delete": {"pk": world["mcp"].pk},
        "config:api_key_revoke": {"pk": world["key"].pk},
        "config:member_remove": {"pk": world["membership"].pk},
        "config:member_invitation_revoke": {"pk": world["invitation"].pk},
        "config:group_delete": {"pk": world["group"].pk},
        "knowledge:delete": {"slug": slug},
        "knowledge:document_delete": {"slug": slug, "pk": doc},
        "activity:case_delete": {"dataset_id": world["dataset"].pk, "case_id": world["case"].pk},
        "activity:evaluation_cancel": {"evaluation_id": world["evaluation"].pk},
        "activity:dataset_delete": {"dataset_id": world["dataset"].pk},
        "fact_delete": {"fact_id": world["fact"].pk},
        "leave_tenant": {},  # (alice, acme's only owner, cannot leave it)
    }
    assert set(kwargs) == _tenant_url_names(), "add the new page to this list"
    return [reverse(name, kwargs={"tenant_slug": "acme", **kw}) for name, kw in kwargs.items()]


_FIELDS: dict[str, list[str]] = {}  # by page, ids aside: the same for every odd value


def field_names(client, url: str) -> list[str]:
    """The names of the page's form fields, plus the query parameters views read."""
    page = re.sub(r"/\d+/", "/#/", url)
    if page not in _FIELDS:
        _FIELDS[page] = _read_field_names(client, url)
    return _FIELDS[page]


def _read_field_names(client, url: str) -> list[str]:
    response = client.get(url)
    found: list[str] = []
    if response.status_code == 200 and not response.streaming:
        found = re.findall(r'<(?:input|select|textarea)[^>]*\sname="([^"]+)"', response.text)
    return list(dict.fromkeys([n for n in found if n != "csrfmiddlewaretoken"] + COMMON_NAMES))


def encoded(names: list[str], value: str) -> str:
    return "&".join(f"{quote(name)}={value}" for name in names)


def snapshot() -> dict:
    """Every row of the tables a page could write, field by field."""
    tables = [Agent, Crew, ToolDefinition, ProviderConnection, ApiKey, Membership, Conversation]
    tables += [Message, Run, Approval, KnowledgeBase, Document, ModelPrice, Quota, Attachment]
    tables += [Fact]
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in tables}


def test_a_nul_anywhere_in_a_web_form_or_query_is_refused_and_nothing_changes(client, trio, world):
    login(client, trio.alice)
    before = snapshot()
    for url in every_url(world):
        names = field_names(client, url)
        for method in ("get", "post"):
            if method == "get":
                response = client.get(f"{url}?{encoded(names, 'a' + NUL + 'b')}")
            else:
                response = client.post(
                    url,
                    encoded(names, "a" + NUL + "b"),
                    content_type="application/x-www-form-urlencoded",
                )
            assert response.status_code == 400, (method, url, response.status_code)
            assert "NUL character" in response.content.decode(), url
    assert snapshot() == before


def test_a_nul_in_a_multipart_form_or_the_path_is_refused(client, trio, world):
    login(client, trio.alice)
    handbook = world["handbook"]
    url = reverse("knowledge:document_add", kwargs={"tenant_slug": "acme", "slug": handbook.slug})
    response = client.post(url, {"title": "a\x00b", "text": "hello"})  # multipart by default
    assert response.status_code == 400
    assert not Document.objects.filter(title__startswith="a").exists()
    response = client.get("/t/acme/tools/try/a%00b/")
    assert response.status_code == 400


@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: v[:12])
def test_odd_values_in_every_web_form_and_query_never_give_a_5xx(client, trio, world, value):
    login(client, trio.alice)
    for url in every_url(world):
        names = field_names(client, url)
        response = client.get(f"{url}?{encoded(names, value)}")
        assert response.status_code < 500, ("get", url)
        if any(word in url for word in DESTRUCTIVE):
            continue  # they take no input; posting would only delete what others need
        response = client.post(
            url, encoded(names, value), content_type="application/x-www-form-urlencoded"
        )
        assert response.status_code < 500, ("post", url)


def _our_model_admins():
    ours = ("agentplatform", "tools", "providers", "agents", "rag")
    for model, model_admin in admin.site._registry.items():
        if model.__module__.split(".")[0] in ours:
            yield model, model_admin


def _text_fields(model) -> list[str]:
    return [
        field.name
        for field in model._meta.concrete_fields
        if isinstance(field, (models.CharField, models.TextField)) and not field.is_relation
    ]


def test_a_nul_in_an_admin_changelist_search_or_filter_is_refused(client, trio, world):
    login(client, trio.alice)
    before = snapshot()
    checked = 0
    for model, _ in _our_model_admins():
        changelist = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        queries = ["q=a%00b"] + [f"{name}__exact=%00" for name in _text_fields(model)]
        for query in queries:
            response = client.get(f"{changelist}?{query}")
            assert response.status_code == 400, (changelist, query, response.status_code)
            checked += 1
    assert checked > 20
    assert snapshot() == before


@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: v[:12])
def test_odd_values_in_admin_changelists_never_give_a_5xx(client, trio, world, value):
    login(client, trio.alice)
    for model, _ in _our_model_admins():
        changelist = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        names = ["q", "id__exact", "p", "o"] + [f"{n}__exact" for n in _text_fields(model)]
        response = client.get(f"{changelist}?{encoded(names, value)}")
        assert response.status_code < 500, (changelist, value[:12])
        response = client.get(f"{changelist}{quote(value)}/change/")
        assert response.status_code < 500, (changelist, value[:12])


@pytest.mark.parametrize(
    "name", ["config:agent_edit", "config:crew_edit", "knowledge:edit"], ids=lambda n: n
)
def test_an_invalid_slug_on_an_edit_page_is_a_field_error_and_the_page_keeps_its_links(
    client, trio, world, name
):
    login(client, trio.alice)
    stored = {"config:agent_edit": "helper", "config:crew_edit": "team"}.get(name, "handbook")
    url = reverse(name, kwargs={"tenant_slug": "acme", "slug": stored})
    data = dict.fromkeys(field_names(client, url), "")
    response = client.post(url, {**data, "name": "Renamed", "slug": "not a slug"})
    assert response.status_code == 400
    assert f"/{stored}/delete/" in response.text  # the links still use the stored slug
    assert not Agent.objects.filter(name="Renamed").exists()
    assert not Crew.objects.filter(name="Renamed").exists()
    assert not KnowledgeBase.objects.filter(name="Renamed").exists()
