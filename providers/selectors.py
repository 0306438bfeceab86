"""The providers app's reads that the faces list and show: connections, model aliases,
prices. Services (services.py beside this) write; these only read. Each takes the tenant
and never returns another tenant's rows; one asked for by id answers 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from providers.models import ModelAlias, ModelPrice, ProviderConnection
from tenancy.access import filter_given, get_for_tenant
from tenancy.models import Tenant


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


def connections_of(
    *, tenant: Tenant, kind: str | None = None, is_default: bool | None = None
) -> QuerySet:
    """The tenant's provider connections; only of `kind`, or only the default (or not),
    when given."""
    connections = ProviderConnection.objects.filter(tenant=tenant)
    return filter_given(connections, kind=kind, is_default=is_default)


def connection_get(*, tenant: Tenant, connection_id: Any) -> ProviderConnection:
    return get_for_tenant(ProviderConnection, tenant, pk=_int(connection_id))


def connection_of(*, tenant: Tenant, connection_id: Any) -> ProviderConnection | None:
    """The tenant's connection `connection_id`, or None (a field's choice: the caller
    answers with a field error, not a 404). One query."""
    return ProviderConnection.objects.filter(tenant=tenant, pk=_int(connection_id)).first()


def model_aliases_of(*, tenant: Tenant) -> QuerySet:
    return ModelAlias.objects.filter(tenant=tenant)


def model_alias_get(*, tenant: Tenant, alias_id: Any) -> ModelAlias:
    return get_for_tenant(ModelAlias, tenant, pk=_int(alias_id))


def prices_of(*, tenant: Tenant, provider_kind: str | None = None) -> QuerySet:
    """The tenant's own model prices; only for `provider_kind` when given."""
    return filter_given(ModelPrice.objects.filter(tenant=tenant), provider_kind=provider_kind)


def price_get(*, tenant: Tenant, price_id: Any) -> ModelPrice:
    return get_for_tenant(ModelPrice, tenant, pk=_int(price_id))


def connection_names(*, tenant: Tenant) -> list[str]:
    """The names of the tenant's connections. One query."""
    return list(ProviderConnection.objects.filter(tenant=tenant).values_list("name", flat=True))
