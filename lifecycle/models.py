from __future__ import annotations

from django.conf import settings
from django.db import models

from tenancy.models import Tenant


class TenantErasureRequest(models.Model):
    """An owner's request that the platform erase their tenant. Nothing is deleted until an
    operator confirms it (`manage.py tenant delete`, or the Django admin's action): the
    erasure then takes this row with everything else of the tenant (lifecycle.erasure)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField(blank=True, max_length=2000)

    class Meta:
        ordering = ["requested_at"]
        constraints = [  # one a tenant: asking again changes nothing
            models.UniqueConstraint(fields=["tenant"], name="tenant_erasure_request_once")
        ]

    def __str__(self) -> str:
        return f"Erasure of {self.tenant} requested {self.requested_at:%Y-%m-%d}"
