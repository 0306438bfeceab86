"""DRF permissions: API keys act only within their scopes."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from tenancy.authentication import ApiClient


def requires_scope(scope: str) -> type[BasePermission]:
    """A permission class: API-key requests need `scope` (or `admin`); browser sessions
    are decided by membership roles in the view, not here."""

    class HasScope(BasePermission):
        message = f"This API key lacks the {str(scope)!r} scope."

        def has_permission(self, request, view) -> bool:
            user = request.user
            if isinstance(user, ApiClient):
                return user.api_key.has_scope(scope)
            return bool(user and user.is_authenticated)

    HasScope.__name__ = f"HasScope_{scope}"
    return HasScope
