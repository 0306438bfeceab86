"""Per-key and per-tenant request budgets, counted atomically in Redis.

DRF's SimpleRateThrottle keeps a list of timestamps in the cache and writes it back after
reading it: concurrent requests read the same list and all pass. Here each request is one
INCR on a fixed window that opens at the window's first request (base.rate_counters),
so N concurrent requests get N distinct counts and exactly the budget passes. The rates
(`api_key`, `tenant` in THROTTLE_RATES) keep DRF's "600/min" form and meaning. REST, `/v1`,
MCP's `tools/call`, the web pages that start work (chat turns, resumes, a tool's test
panel, dry call and self-tests, evaluations, documents added or re-ingested, knowledge
searches) and the Django admin's pages that do the same (Try, Test, documents, search)
count against the same budgets (the same keys). It lives in tenancy, below the apps, so
that the apps' admin pages may ask it too.
"""

from __future__ import annotations

import math

from rest_framework.throttling import SimpleRateThrottle

from base import rate_counters
from tenancy.authentication import ApiClient
from tenancy.models import Tenant
from tenancy.policy import Principal


class AtomicRateThrottle(SimpleRateThrottle):
    """SimpleRateThrottle's interface and rates; an atomic counter instead of a history."""

    _retry_after_s: float | None = None

    def allow_request(self, request, view) -> bool:
        self._retry_after_s = retry_after_sync(request, [self])
        return self._retry_after_s is None

    def wait(self) -> float | None:
        return self._retry_after_s


def retry_after_sync(request, throttles: list[AtomicRateThrottle]) -> float | None:
    """`retry_after` for sync views: the budgets counted in one round trip."""
    counted = _keys(request, throttles)
    if not counted:
        return None
    return _longest_wait(counted, rate_counters.hits([w for _, w in counted]))


async def retry_after(request, throttles: list[AtomicRateThrottle]) -> float | None:
    """None if every throttle allows the request, else the seconds to wait: a view outside
    DRF (the OpenAI-compatible face), counted with rate_counters.hits_async (off the event
    loop, in one round trip with the other requests of the moment)."""
    counted = _keys(request, throttles)
    if not counted:
        return None
    return _longest_wait(counted, await rate_counters.hits_async([w for _, w in counted]))


RATE_LIMITED = "Rate limit reached; retry in {} s."


async def client_retry_after(client: ApiClient) -> int | None:
    """None if an API key's request (a `/v1` one) is within the key's budget and its
    tenant's, else the whole seconds to wait."""
    return _whole(await retry_after(_Caller(client), _budgets()))


async def principal_retry_after(principal: Principal) -> int | None:
    """`client_retry_after` for a request whose principal is known (an MCP call's): its
    key's budget, or its member's (a session's, per user), and its tenant's."""
    return _whole(await retry_after(_Caller.of(principal), _budgets()))


def budget_refusal(principal: Principal) -> str | None:
    """For sync views (the web pages'): the request counted against the principal's budgets
    as `principal_retry_after` counts it; None within them, else the refusal to show, which
    says when to retry."""
    return _refusal(retry_after_sync(_Caller.of(principal), _budgets()))


def user_budget_refusal(user, tenant: Tenant) -> str | None:
    """`budget_refusal` for a signed-in user acting in `tenant` where no principal is built
    (the Django admin's, whose superusers need no membership)."""
    return _refusal(retry_after_sync(_Caller(user, tenant), _budgets()))


def _budgets() -> list[AtomicRateThrottle]:
    return [ApiKeyRateThrottle(), TenantRateThrottle()]


def _whole(wait: float | None) -> int | None:
    return None if wait is None else math.ceil(wait)


def _refusal(wait: float | None) -> str | None:
    return None if wait is None else RATE_LIMITED.format(_whole(wait))


class _Caller:
    """What the throttles read of a request: its user (an API key's ApiClient, or a member)
    and, for a member, the tenant their membership verified."""

    def __init__(self, user, tenant: Tenant | None = None) -> None:
        self.user = user
        self._api_tenant = tenant

    @classmethod
    def of(cls, principal: Principal) -> _Caller:
        if principal.api_key is not None:
            return cls(ApiClient(principal.api_key))
        return cls(principal.user, principal.tenant)


def _keys(request, throttles: list[AtomicRateThrottle]) -> list[tuple[AtomicRateThrottle, tuple]]:
    return [
        (throttle, (key, throttle.duration))
        for throttle in throttles
        if throttle.rate is not None and (key := throttle.get_cache_key(request, None))
    ]


def _longest_wait(counted, counts: list[rate_counters.Count]) -> float | None:
    waits = [
        count.retry_after_s
        for (throttle, _), count in zip(counted, counts, strict=True)
        if count.value > throttle.num_requests
    ]
    return max(waits) if waits else None


class ApiKeyRateThrottle(AtomicRateThrottle):
    scope = "api_key"

    def get_cache_key(self, request, view) -> str | None:
        if isinstance(request.user, ApiClient):
            return f"throttle:key:{request.user.api_key.pk}"
        if request.user and request.user.is_authenticated:
            return f"throttle:user:{request.user.pk}"
        return f"throttle:ip:{self.get_ident(request)}"


class TenantRateThrottle(AtomicRateThrottle):
    """Counts only requests whose tenant is verified: an API key's, or one the session's
    user belongs to (`session_tenant`). A slug in X-Tenant alone proves nothing (anyone may
    send another tenant's), so such a request counts only against its user
    (ApiKeyRateThrottle)."""

    scope = "tenant"

    def get_cache_key(self, request, view) -> str | None:
        user = request.user
        if isinstance(user, ApiClient):
            return f"throttle:tenant:{user.tenant.pk}"
        if not (user and user.is_authenticated):
            return None
        tenant = self.session_tenant(request)
        return None if tenant is None else f"throttle:tenant:{tenant.pk}"

    def session_tenant(self, request) -> Tenant | None:
        """The verified tenant of a session's request: the one the scope permission found."""
        return getattr(request, "_api_tenant", None)
