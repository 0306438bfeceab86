"""Where a gateway model id goes: `<connection>/<model>`, or a model alias (`alias/<name>`)
and its pairs. Its route (the connection, the model, the pass-through that sends to it) is
remembered per tenant configuration version, so a known id costs no query; whether a
provider's answer sends the call on to the next pair is `retryable_status` (the order an
alias's pairs are tried in is the call's: agentplatform/v1/gateway/call.py). docs/fallback.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from base.versions import per_config_version
from providers.models import (
    ALIAS_PREFIX,
    HealthStatus,
    ModelAlias,
    ProviderConnection,
    ProviderKind,
)
from providers.runtime.passthrough import ChatPassthrough, MessagesPassthrough
from providers.runtime.presets import PRESETS
from providers.services import connection_model
from tenancy.models import Tenant
from tools.runtime.egress import EgressPolicy

MAX_ROUTES = 512


@dataclass(frozen=True)
class GatewayRoute:
    """Where a gateway model id (`<connection>/<model>`) goes."""

    connection: ProviderConnection
    model: str
    # ChatPassthrough (OpenAI and compatible: /v1/chat/completions) or MessagesPassthrough
    # (Anthropic: /v1/messages); None for the offline demo.
    passthrough: ChatPassthrough | MessagesPassthrough | None
    # A model alias's other pairs, in order, and how they share load (`load_balancing`).
    fallbacks: tuple[GatewayRoute, ...] = ()
    balancing: str = ""

    @property
    def key(self) -> str:  # for the balancer: the connection
        return str(self.connection.pk)

    @property
    def healthy(self) -> bool:
        return self.connection.health_status != HealthStatus.FAILING

    @property
    def label(self) -> str:
        return f"{self.connection.name}/{self.model}"


_routes: dict[int, tuple[str, dict[str, GatewayRoute]]] = {}


def known_gateway_route(tenant: Tenant, model_id: str) -> GatewayRoute | None:
    """The route this process remembers for `model_id` (Redis reads only: safe from async
    code), or None: ask `gateway_route`."""
    return per_config_version(_routes, tenant.pk, dict).get(model_id)


def gateway_route(tenant: Tenant, model_id: str) -> GatewayRoute | None:
    """The route of `model_id`, remembered per tenant configuration version (a connection
    change moves it; unknown ids are not remembered, so any name may be asked for)."""
    routes = per_config_version(_routes, tenant.pk, dict)
    route = routes.get(model_id)
    if route is None and model_id.startswith(ALIAS_PREFIX):
        route = _alias_route(tenant, model_id.removeprefix(ALIAS_PREFIX))
        if route is None:
            return None
    if route is None:
        found = connection_model(tenant, model_id)
        if found is None:
            return None
        connection, model = found
        route = GatewayRoute(connection, model, _passthrough(connection))
        if len(routes) >= MAX_ROUTES:  # (a connection allowing any model: any name comes)
            routes.clear()
        routes[model_id] = route
    return route


def _alias_route(tenant: Tenant, name: str) -> GatewayRoute | None:
    """The route of the tenant's model alias `name`: its first pair, the others as its
    fallbacks (pairs whose connection is gone are left out). Two queries."""
    alias = ModelAlias.objects.filter(tenant=tenant, name=name).first()
    if alias is None or not isinstance(alias.targets, list):
        return None
    connections = {c.name: c for c in ProviderConnection.objects.filter(tenant=tenant)}
    routes = []
    for target in alias.targets:
        connection = connections.get(target.get("connection", ""))
        model = (target.get("model") or "") or (connection.default_model if connection else "")
        if connection is not None and model:
            routes.append(GatewayRoute(connection, model, _passthrough(connection)))
    if not routes:
        return None
    first = routes[0]
    return GatewayRoute(
        first.connection,
        first.model,
        first.passthrough,
        fallbacks=tuple(routes[1:]),
        balancing=alias.load_balancing,
    )


def _passthrough(connection: ProviderConnection) -> ChatPassthrough | MessagesPassthrough | None:
    """One per connection while it is unchanged (its HTTP connections stay pooled)."""
    key = (connection.pk, connection.updated_at, tuple(settings.EGRESS_ALLOWLIST))
    if key not in _passthroughs:
        if len(_passthroughs) >= MAX_ROUTES:
            _passthroughs.clear()
        _passthroughs[key] = _new_passthrough(connection)
    return _passthroughs[key]


_passthroughs: dict[tuple, ChatPassthrough | MessagesPassthrough | None] = {}


def _new_passthrough(
    connection: ProviderConnection,
) -> ChatPassthrough | MessagesPassthrough | None:
    common = {
        "api_key": connection.api_key or None,
        "headers": connection.extra_headers or {},
        "timeout_s": connection.timeout_s,
        "policy": EgressPolicy(allowlist=tuple(settings.EGRESS_ALLOWLIST)),
    }
    if connection.kind == ProviderKind.ANTHROPIC:
        base_url = connection.base_url or "https://api.anthropic.com"
        return MessagesPassthrough(base_url=base_url, **common)
    if connection.kind == ProviderKind.OFFLINE:
        return None
    preset = PRESETS["openai" if connection.kind == ProviderKind.OPENAI else connection.preset]
    return ChatPassthrough(base_url=connection.base_url or preset.base_url, **common)


def retryable_status(status: int) -> bool:
    """Whether a provider's HTTP answer says to try again (elsewhere): as sdk_errors maps
    it, 408, 429 and 5xx."""
    return status in (408, 429) or status >= 500
