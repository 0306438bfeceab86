"""registry_for_tenant: built-ins + the tenant's enabled definitions + the tools of its
context providers (MCP server connections), cached per process.

Each call costs one cache (Redis) read of the tenant's tools version; the registry is
rebuilt only when a definition or a connection changed since, in whichever process
changed it. Building never touches the network: MCP tools come from each connection's
cached listing, written by `tools.mcp_connections.mcp_connection_refresh`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from base import versions
from tenancy.models import Tenant
from tools import tool_sources
from tools.definitions import build_tool, name_refusal, secret_ref
from tools.models import ToolDefinition
from tools.runtime.builtins import BUILTINS
from tools.runtime.circuit import RedisCircuitStore
from tools.runtime.context import StaticSecrets
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.registry import ToolRegistry
from tools.tool_sources import ToolOrigin


@dataclass(frozen=True)
class TenantTools:
    version: str
    registry: ToolRegistry
    secrets: StaticSecrets
    # Provider name -> (title, text): each available context provider's block for the
    # prompts of agents that use its tools.
    context_blocks: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Tool name -> where it comes from: BUILT_IN, DEFINITION, a tenant tool source's label
    # or another package's plug-in's name.
    sources: Mapping[str, str] = field(default_factory=dict)
    # Tool name -> its origin, as recorded where it was registered (REST shows its kind).
    origins: Mapping[str, ToolOrigin] = field(default_factory=dict)


BUILT_IN, DEFINITION = "built-in", "tenant definition"


T = TypeVar("T")
logger = logging.getLogger(__name__)
_cache: dict[int, TenantTools] = {}
_lock = threading.Lock()


@receiver([post_save, post_delete], sender=ToolDefinition)
def _definition_changed(sender, instance: ToolDefinition, **kwargs) -> None:
    versions.config_changed(instance.tenant_id)


@lru_cache(maxsize=8)
def egress_client(allowlist: tuple[str, ...]) -> GuardedHttpClient:
    return GuardedHttpClient(EgressPolicy(allowlist=allowlist))


@lru_cache(maxsize=4)
def circuit_store(redis_url: str) -> RedisCircuitStore:
    return RedisCircuitStore(redis_url)


def tenant_tools(tenant: Tenant | int) -> TenantTools:
    """The tenant's registry and the secrets its tools use. One cache read when fresh;
    one query plus decryption when rebuilt."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    version = versions.config_version(tenant_id)
    current = fresh_tenant_tools(tenant_id, version)
    if current is not None:
        return current
    with _lock:
        built = _build(tenant_id, version)
        _cache[tenant_id] = built
    return built


def fresh_tenant_tools(tenant_id: int, version: str | None = None) -> TenantTools | None:
    """The built registry if it is current (one cache read, no database: safe to call from
    async code), else None."""
    current = _cache.get(tenant_id)
    if current is not None and current.version == (version or versions.config_version(tenant_id)):
        return current
    return None


def tool_names_besides_definitions(tenant_id: int) -> frozenset[str]:
    """The names the tenant's registry has from other sources than its definitions: the
    built-ins and its MCP servers' tools (`<prefix>__<name>`, as cached and allowed) —
    names an agent may pick — without building the registry (which checks every tool's
    schemas): the cache when fresh, else one query."""
    fresh = fresh_tenant_tools(tenant_id)
    if fresh is not None:
        return frozenset(n for n, source in fresh.sources.items() if source != DEFINITION)
    names = set(BUILTINS.names())
    for source in tool_sources.SOURCES:
        names |= source.names_of(tenant_id)
    return frozenset(names)


def registry_for_tenant(tenant: Tenant | int) -> ToolRegistry:
    return tenant_tools(tenant).registry


def _build(tenant_id: int, version: str) -> TenantTools:
    egress = egress_client(tuple(settings.EGRESS_ALLOWLIST))
    store = circuit_store(settings.REDIS_URL)
    registry = ToolRegistry(BUILTINS)
    secrets: dict[str, str] = {}
    defined: dict[str, ToolOrigin] = {}  # a definition may take a built-in's name
    for definition in ToolDefinition.objects.filter(tenant_id=tenant_id):
        refused = name_refusal(definition)
        if refused is not None:  # stored before the rule, or written around it
            logger.warning("tool %s of tenant %s skipped: %s", definition.name, tenant_id, refused)
            continue
        if not definition.enabled:  # a disabled definition hides the built-in it names
            if registry.has(definition.name):
                registry = registry.filter(exclude=[definition.name])
            continue
        try:
            item = build_tool(definition, egress=egress, circuit_store=store)
        except (ValidationError, ValueError) as exc:  # one broken row must not stop the rest
            logger.warning("tool %s of tenant %s skipped: %s", definition.name, tenant_id, exc)
            continue
        registry.register(item, replace=True)
        defined[item.name] = ToolOrigin(definition.kind)
        if definition.secret:
            secrets[secret_ref(definition)] = definition.secret
    labels: dict[str, str] = {}
    origins: dict[str, ToolOrigin] = {}
    for name in registry.names():
        origin = defined.get(name) or tool_sources.BUILTIN_ORIGINS.get(name, ToolOrigin("builtin"))
        origins[name] = origin
        # another package's plug-in by its name, as a tenant tool source by its label
        plugged = origin.plugin if origin.kind == "plugin" else BUILT_IN
        labels[name] = DEFINITION if name in defined else plugged
    context_blocks: dict[str, tuple[str, str]] = {}
    for source in tool_sources.SOURCES:  # plug-ins: the tenant's MCP servers' tools...
        part = source.tools_of(tenant_id, egress.policy)
        for item in part.tools:
            if registry.has(item.name):
                logger.warning(
                    "%s tool %s of tenant %s skipped: the name is taken",
                    source.label, item.name, tenant_id,
                )  # fmt: skip
                continue
            registry.register(item)
            labels[item.name] = source.label
            origins[item.name] = tool_sources.SOURCE_ORIGINS.get(
                source.label, ToolOrigin("plugin", source.label)
            )
        secrets.update(part.secrets)
        context_blocks.update(part.context_blocks)
    return TenantTools(
        version=version,
        registry=registry,
        secrets=StaticSecrets(secrets),
        context_blocks=context_blocks,
        sources=labels,
        origins=origins,
    )
