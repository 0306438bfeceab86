"""Every route, for every kind of principal, gets what the policy table says.

The routes come from the URLconf (and the OpenAPI schema must name no operation outside
them); each declares its policy action — web views through `tenant_member_required`,
REST views through `read_action`/`write_action`/`action_policy`, `/v1` through
`declares`. A route that declares none, and is not one of the few public ones below,
fails here. Then each route is requested by an owner, an admin, a member, a viewer and an
outsider (a session), and by an API key per scope: a principal the policy refuses gets
403 (an outsider 404), one it allows never gets 401/403 or a 5xx.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

from agents.conversations import attachment_upload
from agents.evaluations import case_save, dataset_save, evaluation_start
from agents.models import AgentDraft, Conversation, Fact, Quota, Run, WorkflowDefinition
from agents.runs import message_queue, run_start
from agents.triggers import trigger_save
from providers.models import ModelPrice
from rag.models import Document, KnowledgeBase
from tenancy import services as tenancy
from tenancy.models import ApiKey, IdentityProvider, Membership, Role, TenantGroup
from tenancy.policy import Action, Principal, declares
from tests.conftest import Trio, make_trio
from tests.factories import (
    add_member,
    login,
    make_agent,
    make_approval,
    make_connection,
    make_crew,
    make_mcp_connection,
    make_tool,
    make_user,
)
from tests.module_data import forget_redis_state, module_rows

pytestmark = pytest.mark.django_db

SAFE = {"GET", "HEAD", "OPTIONS"}
# Routes without a tenant policy, and why.
PUBLIC = {
    "home": "redirects to the user's tenant or the login page",
    "login": "signing in",
    "logout": "signing out",
    "healthz": "health checks for load balancers; no tenant data",
    "metrics": "Prometheus figures of every tenant, for the operator's METRICS_TOKEN only",
    "api_schema": "the OpenAPI document",
    "api_docs": "the API documentation page",
    "api_redoc": "the API documentation page",
    "api_whoami": "who the caller is; no tenant is named",
    "invitation": "the invitee's own link: signed in, not a member yet; the token decides",
    "account": "the signed-in person's own page: their memberships, no tenant's data",
    "leave_tenant": "leaving one's own membership (404 for others), even where the session "
    "may not act: a tenant with password sign-in off (docs/sso.md)",
    "": "/v1's catch-all: 404 in OpenAI's shape for unknown endpoints",
    "api_unknown_path": "/api/v1/'s catch-all: 404 in the API's error shape for unknown paths",
    "oauth_metadata": "the OAuth server's metadata for MCP clients",
    "oauth_resource_metadata": "the MCP endpoint's protected-resource metadata (RFC 9728)",
    "oauth_register": "an MCP client registering itself (RFC 7591)",
    "oauth_authorize": "a signed-in member's consent; they pick one of their own tenants",
    "oauth_token": "the code or refresh token decides",
    "sso_start": "single sign-on begins before anyone is signed in",
    "sso_callback": "single sign-on's return: the session's state decides",
    "trigger_hook": "a webhook trigger's deliveries: the HMAC signature decides",
    "mcp_oauth_callback": "an MCP server's OAuth return: the session's pending flow decides",
    "mcp_oauth_client": "the platform's OAuth client ID metadata document (no tenant data)",
}


@dataclass(frozen=True)
class Route:
    pattern: str
    name: str
    methods: dict[str, Action]  # HTTP method -> the action the policy asks
    kind: str  # web | rest | openai


def _walk(resolver, prefix: str = "", namespace: str | None = None) -> Iterator[tuple]:
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            space = entry.namespace or namespace
            if space == "admin":
                continue  # the Django admin: TenantScopedAdmin scopes it (tests/tenancy)
            yield from _walk(entry, prefix + str(entry.pattern), space)
        elif isinstance(entry, URLPattern):
            name = f"{namespace}:{entry.name}" if namespace and entry.name else entry.name or ""
            yield prefix + str(entry.pattern), name, entry.callback


def _actions(callback) -> dict[str, Action] | None:
    cls = getattr(callback, "cls", None)
    if cls is None:
        action = getattr(callback, "policy_action", None)
        methods = getattr(callback, "policy_methods", ("GET", "POST"))
        return None if action is None else dict.fromkeys(methods, action)
    read, write = getattr(cls, "read_action", None), getattr(cls, "write_action", None)
    if read is None:
        return None
    drf_actions = getattr(callback, "actions", None)
    if drf_actions:  # a viewset: method -> its DRF action
        special = getattr(cls, "action_policy", {})
        return {
            method.upper(): special.get(name) or (read if method.upper() in SAFE else write)
            for method, name in drf_actions.items()
        }
    methods = [m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(cls, m)]
    return {method: read if method in SAFE else write for method in methods}


def routes() -> list[Route]:
    found = []
    for pattern, name, callback in _walk(get_resolver()):
        if name in PUBLIC:
            continue
        methods = _actions(callback)
        assert methods is not None, f"{pattern} ({name}) declares no policy action"
        kind = (
            "openai"
            if pattern.startswith("v1/")
            else "rest"
            if pattern.startswith("api/")
            else "web"
        )
        found.append(Route(pattern, name, methods, kind))
    return found


def test_every_route_declares_its_policy_and_the_schema_names_no_other():
    declared = routes()
    assert len(declared) > 80
    schema = SchemaGenerator().get_schema(request=None, public=True)
    patterns = [_as_regex(route.pattern) for route in declared]
    for path, operations in schema["paths"].items():
        for method in operations:
            if method.upper() not in {"GET", "POST", "PUT", "PATCH", "DELETE"}:
                continue
            concrete = re.sub(r"\{[^}]+\}", "x", path).lstrip("/")
            assert any(p.fullmatch(concrete) for p in patterns) or concrete == "api/v1/whoami", path


def test_a_view_is_read_with_the_action_and_methods_it_declares_and_none_without():
    """The routes' marks are made at import, before any test: this checks on views made here
    that `declares` marks what it is given, and that a view marked with no action reads as
    declaring none (which fails the test above)."""
    marked = declares(Action.START_RUN, methods=("POST", "PUT"))(lambda request: None)
    assert (marked.policy_action, marked.policy_methods) == (Action.START_RUN, ("POST", "PUT"))
    assert _actions(marked) == {"POST": Action.START_RUN, "PUT": Action.START_RUN}
    assert _actions(declares(Action.READ_CONFIG)(lambda request: None)) == {
        "GET": Action.READ_CONFIG
    }
    unmarked = declares(Action.READ_CONFIG)(lambda request: None)
    unmarked.policy_action = None
    assert _actions(unmarked) is None
    assert _actions(lambda request: None) is None


def _as_regex(pattern: str) -> re.Pattern:
    text = pattern.replace("^", "").replace("$", "")
    text = re.sub(r"\(\?P<\w+>[^)]*\)", "[^/]+", text)
    text = re.sub(r"<(?:\w+:)?\w+>", "[^/]+", text)
    return re.compile(text)


# -- the requests --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    """The trio and `world`'s objects, made once for the module's tests (each walks every
    route; the objects cost about a third of a second each time)."""
    with module_rows(django_db_blocker, lambda: _make_world(make_trio())) as made:
        yield made


@pytest.fixture
def trio(module_world, db) -> Trio:
    """The module's trio, its rows as made: what a test writes is rolled back after it."""
    trio = module_world[0]
    forget_redis_state([trio.acme.pk, trio.globex.pk])
    return trio


@pytest.fixture
def world(module_world, trio) -> dict[str, str]:
    return module_world[1]


def _make_world(trio: Trio) -> tuple[Trio, dict[str, str]]:
    """acme's objects, one of each kind, named by the path parameters that reach them
    (`pk:<collection>` for the numeric ids of each collection)."""
    acme = trio.acme
    add_member(acme, make_user("dana"), Role.ADMIN)
    add_member(acme, make_user("vera"), Role.VIEWER)
    victim = add_member(acme, make_user("eve"), Role.MEMBER)  # member routes name eve
    agent = make_agent(acme, "assistant")
    make_crew(acme, "crew")
    # A workflow takes the agent's slug: the routes' `slug` reaches both.
    WorkflowDefinition.objects.create(
        tenant=acme, slug="assistant", name="Flow",
        definition={"steps": [{"id": "a", "transform": "input"}]},
    )  # fmt: skip
    tool = make_tool(acme, "calc")
    connection = make_connection(acme, "conn", "openai", base_url="http://127.0.0.1:9/v1")
    mcp = make_mcp_connection(acme, "http://127.0.0.1:9/mcp", "crm", timeout_s=2)
    kb = KnowledgeBase.objects.create(tenant=acme, slug="handbook", name="Handbook")
    document = Document.objects.create(tenant=acme, knowledge_base=kb, title="Doc")
    conversation = Conversation.objects.create(tenant=acme, agent=agent, owner_user=trio.alice)
    run = run_start(
        tenant=acme, agent=agent, input="hi", conversation=conversation,
        initiated_by=trio.alice, enqueue=False,
    )  # fmt: skip
    approval = make_approval(run, "calc")
    attachment = attachment_upload(
        tenant=acme, conversation=conversation, by=trio.alice, name="a.txt", data=b"a"
    )
    queued = message_queue(tenant=acme, conversation=conversation, text="next", by=trio.alice)
    fact = Fact.objects.create(tenant=acme, user=trio.alice, text="likes tea")
    key, _ = tenancy.api_key_create(tenant=acme, name="victim", scopes=["read"])
    group = tenancy.group_create(tenant=acme, name="victims")
    dataset = dataset_save(tenant=acme, changes={"name": "cases"})
    case = case_save(
        tenant=acme, dataset=dataset, changes={"input": "hi", "expect": {"contains": "x"}}
    )
    evaluation = evaluation_start(
        tenant=acme, dataset=dataset, agent=agent, by=trio.alice, dispatch=False
    )
    draft = AgentDraft.objects.create(
        tenant=acme, agent=agent, fields={"instructions": "x"}, status="failed"
    )
    trigger = trigger_save(
        tenant=acme, by=_principal("alice", acme),
        changes={"name": "hook", "kind": "webhook", "agent": agent, "input_template": "x"},
    ).trigger  # fmt: skip
    quota = Quota.objects.create(
        tenant=acme, scope="tenant", metric="tokens", period="day", limit=10**9
    )
    price = ModelPrice.objects.create(
        tenant=acme, provider_kind="openai", model="m", input_price=1, output_price=1,
        cached_input_price=0, cache_write_price=0,
    )  # fmt: skip
    provider = IdentityProvider.objects.create(
        tenant=acme, slug="acme-idp", name="Acme", issuer="https://idp.example", client_id="c"
    )
    return trio, {
        "tenant_slug": "acme",
        "slug": "assistant",
        "name": "calc",
        "model_id": "assistant",
        "conversation_id": str(conversation.pk),
        "message_id": str(run.in_reply_to_id),
        "conversation": str(conversation.pk),
        "attachment_id": str(attachment.pk),
        "pk:attachments": str(attachment.pk),
        "run_id": str(run.pk),
        "response_id": f"resp_{run.pk}",
        "approval_id": str(approval.pk),
        "queued_id": str(queued.pk),
        "document_id": str(document.pk),
        "kb": "handbook",
        "pk:tools": str(tool.pk),
        "pk:connections": str(connection.pk),
        "pk:provider-connections": str(connection.pk),
        "pk:mcp-connections": str(mcp.pk),
        "pk:documents": str(document.pk),
        "pk:facts": str(fact.pk),
        "pk:api-keys": str(key.pk),
        "pk:members": str(victim.pk),
        "pk:groups": str(group.pk),
        "pk:quotas": str(quota.pk),
        "dataset_id": str(dataset.pk),
        "case_id": str(case.pk),
        "evaluation_id": str(evaluation.pk),
        "other_id": str(evaluation.pk),
        "draft_id": str(draft.pk),
        "pk:prices": str(price.pk),
        "pk:identity-providers": str(provider.pk),
        "kind": "agents",  # configuration history: /history/<kind>/<pk>/<number>/
        "number": "1",
        "trigger_id": str(trigger.pk),
        "fact_id": str(fact.pk),
        "user_id": str(victim.user_id),  # a person's erasure: eve
        "pk:triggers": str(trigger.pk),
    }


def concrete(route: Route, world: dict[str, str]) -> str:
    """The route's path with acme's objects filled in."""
    path = route.pattern.replace("^", "").replace("$", "")
    if "knowledge" in path and "<slug:slug>" in path:
        path = path.replace("<slug:slug>", "handbook")
    if route.name.startswith("config:crew") or "crews" in path:
        path = path.replace("<slug:slug>", "crew").replace("(?P<slug>[^/]+)", "crew")
    if "knowledge-bases" in path:
        path = path.replace("(?P<slug>[^/]+)", "handbook")
    owner = next((seg for seg in reversed(path.split("/")) if seg in _PK_OWNERS), None)
    pk = world.get(f"pk:{owner}", "0") if owner else "0"
    path = re.sub(r"\(\?P<pk>[^)]*\)|<int:pk>", pk, path)
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: world[m.group(1)], path)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: world[m.group(1)], path)
    return "/" + path


_PK_OWNERS = {"tools", "connections", "provider-connections", "documents", "facts"}
_PK_OWNERS |= {"mcp-connections"}
_PK_OWNERS |= {"api-keys", "members", "groups", "invitations"}
_PK_OWNERS |= {"triggers", "prices", "quotas", "identity-providers"}
_PK_OWNERS |= {"attachments"}


PRINCIPALS = ["alice", "dana", "bob", "vera", "charlie"]  # owner, admin, member, viewer, outsider
KEY_SCOPES = ["read", "write", "run", "config", "admin"]


def _principal(username: str, tenant) -> Principal:
    membership = Membership.objects.filter(tenant=tenant, user__username=username).first()
    return Principal.of_membership(membership) if membership else None


def _request(client: Client, method: str, path: str, **headers):
    call = getattr(client, method.lower())
    if method in SAFE or method == "DELETE":
        return call(path, **headers)
    return call(path, "{}", content_type="application/json", **headers)


@pytest.mark.parametrize("username", PRINCIPALS)
def test_sessions_get_what_the_policy_says(username, trio, world):
    user = {"alice": trio.alice, "bob": trio.bob, "charlie": trio.charlie}.get(username)
    user = user or Membership.objects.get(tenant=trio.acme, user__username=username).user
    client = login(Client(), user)
    principal = _principal(username, trio.acme)
    wrong = []
    for route in routes():
        if route.kind == "openai":
            continue  # sessions are not /v1's: test_keys_get_what_the_policy_says
        path = concrete(route, world)
        for method, action in route.methods.items():
            headers = {"HTTP_X_TENANT": "acme"} if route.kind == "rest" else {}
            status = _request(client, method, path, **headers).status_code
            if principal is None:
                ok = status == 404
            elif not principal.may(action):
                ok = status == 403
            else:
                ok = status not in (401, 403) and status < 500
            if not ok:
                wrong.append(f"{method} {path} ({action}): {status}")
    assert not wrong, f"{username}:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("scope", "role"),
    [(scope, Role.OWNER) for scope in KEY_SCOPES]
    + [("admin", Role.ADMIN), ("admin", Role.MEMBER), ("config", Role.VIEWER)],
)
def test_keys_get_what_the_policy_says(scope, role, trio, world):
    """Per scope, and a key never beyond its creator's role (an admin-scope key made by a
    member acts as a member)."""
    key, full = tenancy.api_key_create(
        tenant=trio.acme, name=f"k-{scope}", scopes=[scope], role=role
    )
    principal = Principal.of_key(key)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {full}")
    wrong = []
    for route in routes():
        path = concrete(route, world)
        for method, action in route.methods.items():
            status = _request(client, method, path).status_code
            if route.kind == "web":
                ok = status == 302  # keys do not sign in to the web pages
            elif not principal.may(action):
                ok = status == 403
            else:
                ok = status not in (401, 403) and status < 500
            if not ok:
                wrong.append(f"{method} {path} ({action}): {status}")
    assert ApiKey.objects.get(pk=key.pk).is_usable
    assert not wrong, f"{scope}:\n" + "\n".join(wrong)


def test_the_outsiders_own_key_reaches_none_of_acmes_objects(trio, world):
    _, full = tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["admin"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {full}")
    leaked = []
    for route in routes():
        if route.kind == "web" or not re.search(r"<|\(\?P", route.pattern):
            continue  # lists answer globex's own rows
        path = concrete(route, world)
        for method in route.methods:
            status = _request(client, method, path).status_code
            if status not in (400, 404, 405):
                leaked.append(f"{method} {path}: {status}")
    assert not leaked, "\n".join(leaked)
    assert TenantGroup.objects.filter(tenant=trio.acme).exists()
    assert Run.objects.filter(tenant=trio.acme).exists()
