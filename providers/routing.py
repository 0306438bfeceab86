"""Which connections and models a model call may go to: an agent's connection and its
fallbacks as `providers.runtime.fallback` targets, the adapter that tries them, and the
periodic health check of every connection (`providers.check_connections`, beat every
PROVIDER_HEALTH_S) whose failing verdict sends a connection to the back of the order.
docs/fallback.md."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from providers.models import HealthStatus, ProviderConnection, ProviderKind
from providers.runtime.adapter import ModelAdapter
from providers.runtime.fallback import Balancer, FallbackAdapter, SwitchHook, Target
from providers.services import adapter_for, connection_test
from tenancy import rls

logger = logging.getLogger(__name__)

# This process's in-flight counts and round-robin turns (why per process: see
# providers/runtime/fallback.py). Counts, not tenant data: keyed by connection id.
BALANCER = Balancer()


def _target(connection: ProviderConnection, model: str) -> Target:
    return Target(
        key=str(connection.pk or connection.name),
        connection=connection.name,
        model=model,
        adapter=adapter_for(connection),
        healthy=connection.health_status != HealthStatus.FAILING,
    )


def model_targets(
    primary: ProviderConnection, model: str, fallbacks: Sequence[dict[str, Any]]
) -> tuple[list[Target], list[str]]:
    """The primary connection and model, then each fallback ({"connection": name,
    "model": model or "" for its default}) found among the primary's tenant's connections;
    one named that no longer exists is skipped (saving refuses such names; a connection
    deleted since is not an error for a run). With them, the fallbacks' API keys (for the
    run to scrub from what it stores). One query when there are fallbacks."""
    targets = [_target(primary, model)]
    keys: list[str] = []
    if not fallbacks or primary.tenant_id is None:
        return targets, keys
    names = {str(f.get("connection", "")) for f in fallbacks}
    found = {
        c.name: c
        for c in ProviderConnection.objects.filter(tenant_id=primary.tenant_id, name__in=names)
    }
    for fallback in fallbacks:
        connection = found.get(fallback.get("connection", ""))
        if connection is None:
            logger.info("skipping a fallback to a connection that no longer exists")
            continue
        chosen = fallback.get("model") or connection.default_model or "default"
        if connection.allowed_models and chosen not in connection.allowed_models:
            continue
        targets.append(_target(connection, chosen))
        if connection.api_key:
            keys.append(connection.api_key)
    return targets, keys


def routed_adapter(
    targets: Sequence[Target], balancing: str, on_switch: SwitchHook | None
) -> ModelAdapter:
    """One target's own adapter, or a FallbackAdapter over several."""
    if len(targets) == 1:
        return targets[0].adapter
    return FallbackAdapter(targets, balancing=balancing, balancer=BALANCER, on_switch=on_switch)


def check_connections() -> int:
    """Check every connection of every tenant (a models list, or a 1-token request where
    there is none: `connection_test`), each in its tenant's scope, recording its health.
    The offline demo needs no check. One request per connection."""
    with rls.owner():  # which connections, across tenants
        found = list(
            ProviderConnection.objects.exclude(kind=ProviderKind.OFFLINE).values_list(
                "pk", "tenant_id"
            )
        )
    by_tenant: dict[int, list[int]] = {}
    for pk, tenant_id in found:
        by_tenant.setdefault(tenant_id, []).append(pk)
    for tenant_id, pks in by_tenant.items():
        with rls.tenant_scope(tenant_id):
            for connection in ProviderConnection.objects.filter(pk__in=pks):
                try:
                    connection_test(connection)
                except Exception:  # one connection's bug must not stop the others' checks
                    logger.exception("health check of connection %s raised", connection.pk)
    return len(found)
