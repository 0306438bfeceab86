"""Provider connections -> adapters; platform keys; saving and deleting connections;
connection tests; demo seeding."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import Signal, receiver
from django.http import Http404
from django.utils import timezone
from django.utils.text import slugify

from base.versions import config_changed, per_config_version
from providers.models import (
    HealthStatus,
    ModelAlias,
    ModelPrice,
    ProviderConnection,
    ProviderKind,
)
from providers.runtime.adapter import ModelAdapter
from providers.runtime.errors import BadRequest, ProviderError
from providers.runtime.llm_tool import ConnectionNotFound, ModelConnection, llm_tool
from providers.runtime.offline import OfflineModel
from providers.runtime.presets import PRESETS
from providers.runtime.retry import RetryPolicy
from providers.runtime.types import ModelRequest, UserMessage
from tenancy.models import Tenant
from tenancy.records.saving import delete_recorded, save_validated
from tools.runtime.egress import EgressPolicy, guarded_async_client

DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1-mini"}

_adapters: dict[tuple, ModelAdapter] = {}
_lock = threading.Lock()


def adapter_for(connection: ProviderConnection) -> ModelAdapter:
    """The runtime adapter for a connection, reused while the connection is unchanged (so
    its HTTP connections stay pooled). Traffic passes the egress policy: a base URL on a
    private network needs EGRESS_ALLOWLIST."""
    allowlist = tuple(settings.EGRESS_ALLOWLIST)
    key = (connection.pk, connection.name, connection.updated_at, allowlist)
    adapter = _adapters.get(key)
    if adapter is None:
        with _lock:
            adapter = _adapters.get(key) or _build(connection, allowlist)
            _adapters[key] = adapter
    return adapter


def _build(connection: ProviderConnection, allowlist: tuple[str, ...]) -> ModelAdapter:
    common = {
        "api_key": connection.api_key or None,
        "base_url": connection.base_url or None,
        "timeout_s": connection.timeout_s,
        "headers": connection.extra_headers or {},
        "retry": RetryPolicy(max_attempts=connection.max_retries + 1),
        # As many model calls at once as the process runs runs: a smaller pool would queue
        # the rest (with the default 100, two workers reached the model 200 at a time).
        "http_client": partial(
            guarded_async_client,
            EgressPolicy(allowlist=allowlist),
            max_connections=settings.RUN_CONCURRENCY,
        ),
    }
    streams = {"egress": EgressPolicy(allowlist=allowlist)}  # (an OpenAI stream's own client)
    if connection.kind == ProviderKind.ANTHROPIC:
        # Imported here: the anthropic SDK costs a process about 1.2 s and 40 MB to load
        # (bench/startup.py), paid only by processes that call Anthropic.
        from providers.runtime.anthropic_adapter import AnthropicAdapter

        return AnthropicAdapter(**common)
    # Imported here too: the openai SDK costs a process about 0.5 s to load, and neither a
    # management command nor a process that only serves pages needs it.
    from providers.runtime.openai_adapter import OpenAIAdapter

    if connection.kind == ProviderKind.OPENAI:
        return OpenAIAdapter(preset="openai", **common, **streams)
    if connection.kind == ProviderKind.OPENAI_COMPATIBLE:
        return OpenAIAdapter(preset=connection.preset, **common, **streams)
    return OfflineModel()


def platform_connections() -> list[ProviderConnection]:
    """Unsaved connections for the keys in the platform's environment."""
    found = []
    for name, key in settings.PLATFORM_PROVIDER_KEYS.items():
        kind = name if name in ("anthropic", "openai") else ProviderKind.OPENAI_COMPATIBLE
        preset = "" if name in ("anthropic", "openai") else name
        found.append(
            ProviderConnection(
                name=f"Platform {PRESETS[name].label if preset else name.title()}",
                kind=kind,
                preset=preset,
                api_key=key,
                default_model=DEFAULT_MODELS.get(name) or PRESETS[name].default_model,
            )
        )
    return found


def connections_for(tenant: Tenant) -> list[ProviderConnection]:
    """The tenant's own connections, then the platform's when the operator shares them."""
    own = list(ProviderConnection.objects.filter(tenant=tenant))
    shared = platform_connections() if settings.PLATFORM_PROVIDERS_FOR_TENANTS else []
    return own + shared


def connection_handle(connection: ProviderConnection) -> str:
    """How a model id names the connection: `<handle>/<model>` (its name, slugified)."""
    return slugify(connection.name) or f"connection-{connection.pk}"


def connection_model(tenant: Tenant, model_id: str) -> tuple[ProviderConnection, str] | None:
    """The connection and model `<handle>/<model>` names, if the tenant has that connection
    and allows that model on it (an empty allow-list allows any); else None."""
    handle, slash, model = model_id.partition("/")
    if not slash or not model or len(model) > 200:
        return None
    for connection in connections_for(tenant):
        if connection.pk is None:  # the operator's shared keys serve agents, not raw calls
            continue
        if connection_handle(connection) == handle:
            allowed = connection.allowed_models
            return (connection, model) if not allowed or model in allowed else None
    return None


def model_connection(tenant_id: int | str, name: str | None) -> ModelConnection:
    """The tenant's own connection called `name` (its name in any case, or its handle), or
    its default one (else its first) when `name` is None, as the `llm` tool uses it.
    ConnectionNotFound (with the names it has) otherwise: another tenant's connection is
    not found either. The operator's shared keys are not among them (as for raw calls).
    One query."""
    own = list(ProviderConnection.objects.filter(tenant_id=int(tenant_id)).order_by("name"))
    if name is None:
        chosen = next((c for c in own if c.is_default), next(iter(own), None))
    else:
        wanted = name.casefold()
        chosen = next((c for c in own if wanted in (c.name.casefold(), connection_handle(c))), None)
    if chosen is None:
        raise ConnectionNotFound([c.name for c in own])
    return ModelConnection(
        name=chosen.name,
        adapter=adapter_for(chosen),
        default_model=chosen.default_model,
        allowed_models=tuple(chosen.allowed_models),
        price_kind=chosen.price_kind,
    )


# The `llm` built-in (ProvidersConfig.ready registers it with the others).
LLM_TOOL = llm_tool(sync_to_async(model_connection))


@receiver([post_save, post_delete], sender=ModelAlias)
def _alias_changed(sender, instance: ModelAlias, **kwargs) -> None:
    if instance.tenant_id is not None:
        config_changed(instance.tenant_id)


def model_alias_save(
    *,
    tenant: Tenant,
    alias: ModelAlias | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> ModelAlias:
    """Create or change a model alias (its connections checked by its clean, and the
    tenant's whole configuration compiled with it unless `graph_checked`)."""
    if alias is None:
        alias = ModelAlias(tenant=tenant)
    elif alias.tenant_id != tenant.pk:
        raise Http404("No such model alias.")
    alias.graph_checked = graph_checked
    return save_validated(alias, changes)


def model_alias_delete(*, tenant: Tenant, alias: ModelAlias) -> None:
    if alias.tenant_id != tenant.pk:
        raise Http404("No such model alias.")
    delete_recorded(alias)


def gateway_models(tenant: Tenant) -> list[tuple[str, Any]]:
    """The gateway model ids the tenant offers, with when their connection was made."""
    found = []
    for connection in connections_for(tenant):
        if connection.kind != ProviderKind.OFFLINE and connection.pk is not None:
            models = connection.allowed_models or [connection.default_model]
            handle = connection_handle(connection)
            created = connection.created_at or timezone.now()
            found += [(f"{handle}/{model}", created) for model in models if model]
    for alias in ModelAlias.objects.filter(tenant=tenant):
        found.append((str(alias), alias.created_at))
    return found


def default_connection(tenant: Tenant) -> ProviderConnection | None:
    """The tenant's default connection (else its first). Remembered per process while the
    tenant's configuration version (tools.loader: bumped by any connection change) holds."""

    def find() -> ProviderConnection | None:
        connections = connections_for(tenant)
        return next((c for c in connections if c.is_default), next(iter(connections), None))

    return per_config_version(_defaults, tenant.pk, find)


_defaults: dict[int, tuple[str, ProviderConnection | None]] = {}


@receiver([post_save, post_delete], sender=ProviderConnection)
def _connection_changed(sender, instance: ProviderConnection, **kwargs) -> None:
    if instance.tenant_id is not None:
        config_changed(instance.tenant_id)


# Sent inside a connection's save, before it is checked, when its name changes (tenant_id,
# old, new): whatever names connections by name (agents' fallbacks, model aliases) follows.
connection_renamed = Signal()


@receiver(connection_renamed, dispatch_uid="providers-aliases-follow-renames")
def _aliases_follow(sender, tenant_id: int, old: str, new: str, **kwargs) -> None:
    """Model aliases naming the old name name the new one (one query, then one per alias)."""
    named = ModelAlias.objects.filter(tenant_id=tenant_id, targets__contains=[{"connection": old}])
    for alias in named:
        targets = [
            {**t, "connection": new} if t.get("connection") == old else t for t in alias.targets
        ]
        ModelAlias.objects.filter(pk=alias.pk).update(targets=targets)


def connection_save(
    *,
    tenant: Tenant,
    connection: ProviderConnection | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> ProviderConnection:
    """Create or change a connection; a new default unsets the tenant's previous one. The
    tenant's whole configuration is compiled with it, unless `graph_checked`: the caller
    compiled the end state itself (`base.config_checks`)."""
    if connection is None:
        connection = ProviderConnection(tenant=tenant)
    elif connection.tenant_id != tenant.pk:
        raise Http404("No such provider connection.")
    connection.graph_checked = graph_checked

    def take_over_default(saving: ProviderConnection) -> None:
        if saving.is_default:  # one default per tenant: the new one takes over
            others = ProviderConnection.objects.filter(tenant=tenant, is_default=True)
            if saving.pk is not None:
                others = others.exclude(pk=saving.pk)
            others.update(is_default=False)
        if saving.pk is not None:  # (in the save's transaction: refused, it is undone)
            stored = ProviderConnection.objects.filter(pk=saving.pk).values_list("name", flat=True)
            old = stored.first()
            if old is not None and old != saving.name:
                connection_renamed.send(
                    sender=ProviderConnection, tenant_id=tenant.pk, old=old, new=saving.name
                )

    return save_validated(connection, changes, before=take_over_default)


def connection_delete(*, tenant: Tenant, connection: ProviderConnection) -> None:
    """Delete one of the tenant's provider connections."""
    if connection.tenant_id != tenant.pk:
        raise Http404("No such provider connection.")
    delete_recorded(connection)


def price_save(
    *, tenant: Tenant, price: ModelPrice | None = None, changes: dict[str, Any]
) -> ModelPrice:
    """Create or change one of the tenant's model prices (checked: ModelPrice.clean); every
    process prices with it from its next lookup (providers.pricing)."""
    if price is None:
        price = ModelPrice(tenant=tenant)
    elif price.tenant_id != tenant.pk:
        raise Http404("No such price.")
    return save_validated(price, changes)


def price_delete(*, tenant: Tenant, price: ModelPrice) -> None:
    """Delete a tenant's price: its model takes the built-in price again, if any."""
    if price.tenant_id != tenant.pk:
        raise Http404("No such price.")
    delete_recorded(price)


def connection_test(connection: ProviderConnection) -> tuple[bool, str]:
    """List models (or, where listing is unsupported, send a 1-token request); store and
    return the outcome. The message names the problem, never the key."""
    adapter = adapter_for(connection)
    try:
        message = async_to_sync(_probe)(adapter, connection)
        ok = True
    except ProviderError as exc:
        ok, message = False, str(exc)
    if connection.pk:
        status = HealthStatus.OK if ok else HealthStatus.FAILING
        changed = (
            ProviderConnection.objects.filter(pk=connection.pk)
            .exclude(health_status=status)
            .exists()
        )
        ProviderConnection.objects.filter(pk=connection.pk).update(
            health_status=status, health_message=message[:1000], last_checked_at=timezone.now()
        )
        if changed:  # remembered routes and defaults carry it: a failing one goes last
            config_changed(connection.tenant_id)
    return ok, message


async def _probe(adapter: ModelAdapter, connection: ProviderConnection) -> str:
    if isinstance(adapter, OfflineModel):
        return "The offline demo model needs no connection."
    try:
        models = await adapter.list_models()
        shown = ", ".join(models[:5]) + ("…" if len(models) > 5 else "")
        return f"Connected: {len(models)} model(s) available ({shown})."
    except BadRequest:  # some compatible servers have no /models
        model = connection.default_model or "default"
        request = ModelRequest(model=model, messages=[UserMessage("ping")], max_tokens=1)
        response = await adapter.complete(request)
        return f"Connected: {response.model or model} answered."


@transaction.atomic
def seed_demo_connection(tenant: Tenant) -> ProviderConnection:
    """The demo tenant's default connection: a real provider when the platform has a key
    (Anthropic first, then OpenAI), else the offline demo model. A real connection that
    exists is kept; an offline one gives way once a key is configured."""
    existing = ProviderConnection.objects.filter(tenant=tenant).first()
    has_key = any(settings.PLATFORM_PROVIDER_KEYS.get(n) for n in ("anthropic", "openai"))
    if existing is not None and not (existing.kind == ProviderKind.OFFLINE and has_key):
        return existing
    ProviderConnection.objects.filter(tenant=tenant, is_default=True).update(is_default=False)
    for name in ("anthropic", "openai"):
        key = settings.PLATFORM_PROVIDER_KEYS.get(name)
        if key:
            return ProviderConnection.objects.create(
                tenant=tenant,
                name=name.title(),
                kind=name,
                api_key=key,
                default_model=DEFAULT_MODELS[name],
                is_default=True,
            )
    return ProviderConnection.objects.create(
        tenant=tenant,
        name="Offline demo",
        kind=ProviderKind.OFFLINE,
        default_model="offline-demo",
        is_default=True,
    )
