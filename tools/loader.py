"""registry_for_tenant: built-ins + the tenant's enabled definitions, cached per process.

Each call costs one cache (Redis) read of the tenant's tools version; the registry is
rebuilt only when a definition changed since, in whichever process changed it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models.signals import post_delete, post_save
from django.db.transaction import on_commit
from django.dispatch import receiver

from agentplatform.tenancy.models import Tenant
from tools.definitions import build_tool, secret_ref
from tools.models import ToolDefinition
from tools.runtime.builtins import BUILTINS
from tools.runtime.circuit import RedisCircuitStore
from tools.runtime.context import StaticSecrets
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.registry import ToolRegistry


@dataclass(frozen=True)
class TenantTools:
    version: str
    registry: ToolRegistry
    secrets: StaticSecrets


logger = logging.getLogger(__name__)
_cache: dict[int, TenantTools] = {}
_lock = threading.Lock()


def _version_key(tenant_id: int) -> str:
    return f"tools:version:{tenant_id}"


def tools_version(tenant_id: int) -> str:
    key = _version_key(tenant_id)
    version = cache.get(key)
    if version is None:
        cache.add(key, uuid.uuid4().hex, timeout=None)
        version = cache.get(key)
    return version


def invalidate(tenant_id: int) -> None:
    cache.set(_version_key(tenant_id), uuid.uuid4().hex, timeout=None)


@receiver([post_save, post_delete], sender=ToolDefinition)
def _definition_changed(sender, instance: ToolDefinition, **kwargs) -> None:
    # Now, so this process's next read in the same transaction sees the change, and again
    # after commit, so a process that rebuilt from not-yet-committed data rebuilds again.
    invalidate(instance.tenant_id)
    on_commit(lambda: invalidate(instance.tenant_id))


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
    version = tools_version(tenant_id)
    current = _cache.get(tenant_id)
    if current is not None and current.version == version:
        return current
    with _lock:
        built = _build(tenant_id, version)
        _cache[tenant_id] = built
    return built


def registry_for_tenant(tenant: Tenant | int) -> ToolRegistry:
    return tenant_tools(tenant).registry


def _build(tenant_id: int, version: str) -> TenantTools:
    egress = egress_client(tuple(settings.EGRESS_ALLOWLIST))
    store = circuit_store(settings.REDIS_URL)
    registry = ToolRegistry(BUILTINS)
    secrets: dict[str, str] = {}
    for definition in ToolDefinition.objects.filter(tenant_id=tenant_id):
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
        if definition.secret:
            secrets[secret_ref(definition)] = definition.secret
    return TenantTools(version=version, registry=registry, secrets=StaticSecrets(secrets))
