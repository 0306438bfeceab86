"""`Authorization: Bearer <api key>` for the REST API (and, later, MCP)."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions

from tenancy import rls
from tenancy.api_keys import find_usable_key
from tenancy.models import ApiKey, Tenant


@dataclass(frozen=True)
class ApiClient:
    """request.user for API-key requests: acts for one tenant with the key's scopes."""

    api_key: ApiKey

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False

    @property
    def tenant(self) -> Tenant:
        return self.api_key.tenant

    @property
    def pk(self) -> None:  # not a Django user; code that needs one must check
        return None

    def __str__(self) -> str:
        return f"api key {self.api_key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request) -> tuple[ApiClient, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        token = token.strip()
        if not token:
            raise exceptions.AuthenticationFailed("Empty bearer token.")
        key = find_usable_key(token)
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired API key.")
        rls.set_request_tenants([key.tenant_id])  # the REST API and /v1 act for its tenant
        return ApiClient(api_key=key), key

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'
