"""The data life's own records: an owner's erasure request, a tenant's retention settings
and its legal holds."""

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


class RetentionPolicy(models.Model):
    """How many days a tenant's data is kept (lifecycle/retention.py). A field left empty
    follows the platform's default (settings.RETENTION_*_DAYS, itself empty: forever); 0
    keeps it forever whatever the default. `legal_hold` stops every purge of the tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run_days = models.PositiveIntegerField(null=True, blank=True)
    conversation_days = models.PositiveIntegerField(null=True, blank=True)
    attachment_days = models.PositiveIntegerField(null=True, blank=True)
    audit_days = models.PositiveIntegerField(null=True, blank=True)
    legal_hold = models.BooleanField(default=False)
    legal_hold_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant"], name="retention_one_per_tenant")]
        verbose_name_plural = "retention policies"

    def __str__(self) -> str:
        return f"Retention of tenant {self.tenant_id}"


class LegalHold(models.Model):
    """A conversation no purge touches while the hold stands: its messages, attachments and
    the events of its runs."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        "agents.Conversation", on_delete=models.CASCADE, related_name="+"
    )
    reason = models.CharField(max_length=300, blank=True)
    placed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    placed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation"], name="legal_hold_one_per_conversation")
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"Legal hold on conversation {self.conversation_id}"


class ExportStatus(models.TextChoices):
    BUILDING = "building", "Building"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class TenantExport(models.Model):
    """An owner's archive of the whole tenant (lifecycle/tenant_exports.py): built by a
    worker, kept in the attachments' storage under `t<id>/exports/` until `expires_at`,
    then deleted. One a tenant: asking again replaces it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(
        max_length=10, choices=ExportStatus.choices, default=ExportStatus.BUILDING
    )
    progress = models.CharField(max_length=100, blank=True)  # the kind being written
    rows_done = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)  # the worker's last sign of life
    storage_key = models.CharField(max_length=200, blank=True)
    size = models.PositiveBigIntegerField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    downloads = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant"], name="tenant_export_one_per_tenant")
        ]

    def __str__(self) -> str:
        return f"Export of tenant {self.tenant_id} ({self.status})"
