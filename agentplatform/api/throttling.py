"""The REST API's tenant budget: a session's tenant found from its `X-Tenant` where no scope
permission found it first (agentplatform.throttling counts the budgets)."""

from __future__ import annotations

from django.http import Http404

from agentplatform import throttling
from agentplatform.api.tenant import request_tenant
from tenancy.models import Tenant


class SessionTenantRateThrottle(throttling.TenantRateThrottle):
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
