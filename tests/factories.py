"""Small factories for tests, and `login`.

Users, tenants and memberships go through the real services. Configuration rows (agents,
crews, provider connections, tool definitions, MCP server connections) and approvals are
written straight with the ORM: no validation, no service-side effects — a test of
those goes through the service or the page it is about. Each factory takes the fields
that matter to the test as keyword overrides; the rest are plain defaults.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import Agent, Approval, Crew, CrewMember, Run
from providers.models import ProviderConnection
from tenancy import services
from tenancy.models import Membership, Role, Tenant
from tools.models import McpServerConnection, ToolDefinition

PASSWORD = "correct horse battery staple"

C = TypeVar("C", bound=Client)


def make_user(username: str, **extra):
    return get_user_model().objects.create_user(
        username=username, email=f"{username}@example.test", password=PASSWORD, **extra
    )


def make_tenant(slug: str, owner=None) -> Tenant:
    return services.tenant_create(slug=slug, name=slug.title(), owner=owner)


def add_member(tenant: Tenant, user, role: str = Role.MEMBER) -> Membership:
    return services.membership_set(tenant=tenant, user=user, role=role)


def login(client: C, user, *, tenant: Tenant | str | None = None) -> C:
    """Signs `user` (made with `PASSWORD`) in on `client` — a `Client` or DRF `APIClient` —
    and returns it. With `tenant`, every request names it in `X-Tenant`, as the REST API
    expects of a session; the web pages take the tenant from their URL instead."""
    assert client.login(username=user.username, password=PASSWORD), user.username
    if tenant is not None:
        client.defaults["HTTP_X_TENANT"] = tenant if isinstance(tenant, str) else tenant.slug
    return client


def make_agent(tenant: Tenant, slug: str = "assistant", **fields: Any) -> Agent:
    """An agent named after its slug."""
    return Agent.objects.create(tenant=tenant, slug=slug, **{"name": slug.title(), **fields})


def make_crew(
    tenant: Tenant, slug: str = "team", members: Iterable[Agent] = (), **fields: Any
) -> Crew:
    """A crew named after its slug (sequential unless `mode=`), with `members` in order."""
    crew = Crew.objects.create(tenant=tenant, slug=slug, **{"name": slug.title(), **fields})
    for position, agent in enumerate(members):
        CrewMember.objects.create(tenant=tenant, crew=crew, agent=agent, position=position)
    return crew


def make_connection(
    tenant: Tenant, name: str = "Offline", kind: str = "offline", **fields: Any
) -> ProviderConnection:
    """A provider connection; the offline kind needs no key nor server."""
    return ProviderConnection.objects.create(tenant=tenant, name=name, kind=kind, **fields)


def make_tool(tenant: Tenant, name: str = "calc", **fields: Any) -> ToolDefinition:
    """A tool definition: the built-in calculator under `name` unless `kind=`/`config=`
    say otherwise (see `make_http_tool` for an HTTP one)."""
    defaults = {"kind": "builtin", "config": {"builtin": "calculator"}}
    return ToolDefinition.objects.create(tenant=tenant, name=name, **{**defaults, **fields})


def make_http_tool(
    tenant: Tenant,
    name: str,
    url: str,
    *,
    method: str = "GET",
    input_schema: dict | None = None,
    **fields: Any,
) -> ToolDefinition:
    """An HTTP tool calling `method url`; without `input_schema`, it takes one string `q`.
    Other `config` keys (auth, args) come in `config=`, merged over the method and URL."""
    config = {"method": method, "url": url, **fields.pop("config", {})}
    schema = input_schema or {"type": "object", "properties": {"q": {"type": "string"}}}
    defaults = {"description": f"Call {name}.", "input_schema": schema}
    return ToolDefinition.objects.create(
        tenant=tenant, name=name, kind="http", config=config, **{**defaults, **fields}
    )


def make_mcp_connection(
    tenant: Tenant, url: str, name: str = "docs", **fields: Any
) -> McpServerConnection:
    """An MCP server connection to `url`; not refreshed (its tools are not imported yet)."""
    return McpServerConnection.objects.create(tenant=tenant, name=name, url=url, **fields)


def make_approval(
    run: Run, tool_name: str = "transfer", call_id: str = "c1", **fields: Any
) -> Approval:
    """A pending approval of one of `run`'s tool calls (the run's status is left as it is)."""
    return Approval.objects.create(
        tenant=run.tenant, run=run, call_id=call_id, tool_name=tool_name, **fields
    )
