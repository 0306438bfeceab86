"""Per-key and per-tenant request budgets, counted in Redis (the default cache)."""

from __future__ import annotations

from rest_framework.throttling import SimpleRateThrottle

from agentplatform.tenancy.authentication import ApiClient


class ApiKeyRateThrottle(SimpleRateThrottle):
    scope = "api_key"

    def get_cache_key(self, request, view) -> str | None:
        if isinstance(request.user, ApiClient):
            return f"throttle:key:{request.user.api_key.pk}"
        if request.user and request.user.is_authenticated:
            return f"throttle:user:{request.user.pk}"
        return f"throttle:ip:{self.get_ident(request)}"


class TenantRateThrottle(SimpleRateThrottle):
    scope = "tenant"

    def get_cache_key(self, request, view) -> str | None:
        if isinstance(request.user, ApiClient):
            return f"throttle:tenant:{request.user.tenant.pk}"
        slug = request.headers.get("X-Tenant")
        return f"throttle:tenant-slug:{slug}" if slug else None
