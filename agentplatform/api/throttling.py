"""The REST API's budgets, counted together (`RestBudgets`), and its tenant budget: a
session's tenant found from its `X-Tenant` where no scope permission found it first
(tenancy.request_budgets counts the budgets)."""

from __future__ import annotations

from django.http import Http404
from rest_framework.throttling import BaseThrottle

from agentplatform.api.tenant import request_tenant
from tenancy import request_budgets
from tenancy.models import Tenant


class SessionTenantRateThrottle(request_budgets.TenantRateThrottle):
    def session_tenant(self, request) -> Tenant | None:
        tenant = super().session_tenant(request)
        if tenant is not None:
            return tenant
        if not (request.headers.get("X-Tenant") or request.GET.get("tenant")):
            return None
        try:
            return request_tenant(request)  # one query, cached on the request
        except Http404:
            return None  # not a member: the view answers 404 itself


class RestBudgets(BaseThrottle):
    """The caller's budget (its key's, or its user's) and its tenant's, counted in one Redis
    round trip: DRF asks each throttle class of its own, a round trip each."""

    _retry_after_s: float | None = None

    def allow_request(self, request, view) -> bool:
        budgets = [request_budgets.ApiKeyRateThrottle(), SessionTenantRateThrottle()]
        self._retry_after_s = request_budgets.retry_after_sync(request, budgets)
        return self._retry_after_s is None

    def wait(self) -> float | None:
        return self._retry_after_s
