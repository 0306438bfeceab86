"""An owner's request that their tenant be erased, which an operator confirms (the
`tenant delete` command, or the Django admin's action on the request): the owner cannot
erase a tenant alone, and nothing is deleted by the request itself."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from lifecycle.models import TenantErasureRequest
from tenancy.models import AuditAction, Tenant
from tenancy.policy import Principal
from tenancy.records import audit

OWNERS_ONLY = "Only an owner may ask for the workspace's erasure."
MAX_REASON = 2000


def erasure_request_of(*, tenant: Tenant) -> TenantErasureRequest | None:
    return TenantErasureRequest.objects.filter(tenant=tenant).select_related("requested_by").first()


def erasure_requests_pending() -> QuerySet[TenantErasureRequest]:
    """Every tenant's request, oldest first (the operator's list: read as the owner)."""
    return TenantErasureRequest.objects.select_related("tenant", "requested_by")


def erasure_request(*, tenant: Tenant, by: Principal, reason: object = "") -> TenantErasureRequest:
    """Ask for `tenant`'s erasure (an owner's session); asking again returns the request
    already made. Audited."""
    if not by.is_owner or by.user is None:
        raise PermissionDenied(OWNERS_ONLY)
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValidationError({"reason": f"A reason is text of at most {MAX_REASON} characters."})
    reason = reason.replace("\x00", "").strip()
    existing = erasure_request_of(tenant=tenant)
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            made = TenantErasureRequest.objects.create(
                tenant=tenant, requested_by=by.user, reason=reason
            )
            audit.record(
                tenant=tenant,
                action=AuditAction.CONFIG_CHANGED,
                actor=by.user,
                obj=made,
                details={"erasure_requested": True},
            )
    except IntegrityError:  # asked twice at once: the first stands
        return erasure_request_of(tenant=tenant)
    return made


def erasure_request_withdraw(*, tenant: Tenant, by: Principal) -> None:
    """Withdraw the request before an operator acts on it (an owner). Audited."""
    if not by.is_owner or by.user is None:
        raise PermissionDenied(OWNERS_ONLY)
    with transaction.atomic():
        deleted, _ = TenantErasureRequest.objects.filter(tenant=tenant).delete()
        if deleted:
            audit.record(
                tenant=tenant,
                action=AuditAction.CONFIG_CHANGED,
                actor=by.user,
                details={"erasure_withdrawn": True},
            )
