"""Tenant tool definitions: built-in aliases and HTTP tools declared in configuration."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from agentplatform.encryption import EncryptedTextField
from agentplatform.tenancy.models import Tenant
from tools.runtime.tool import NAME_PATTERN, Effect


class ToolKind(models.TextChoices):
    BUILTIN = "builtin", "Built-in"
    HTTP = "http", "HTTP API call"


class ToolDefinition(models.Model):
    """One tool in a tenant's registry.

    A definition named like a built-in replaces it for this tenant (or hides it, when
    disabled). `version` grows on every save; registries are rebuilt when it changes.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_definitions")
    name = models.CharField(
        max_length=64,
        validators=[RegexValidator(NAME_PATTERN.pattern, "Use 1-64 letters, digits, _ or -.")],
    )
    description = models.TextField(
        blank=True, help_text="What the model reads to decide when to call the tool."
    )
    kind = models.CharField(max_length=10, choices=ToolKind.choices, default=ToolKind.HTTP)
    input_schema = models.JSONField(
        default=dict, blank=True, help_text="JSON Schema (an object) of the model's arguments."
    )
    output_schema = models.JSONField(null=True, blank=True)
    config = models.JSONField(default=dict, blank=True)
    secret = EncryptedTextField(null=True, blank=True)
    tags = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    # Blank / null: derived (HTTP: GET reads and is idempotent, PUT/DELETE are idempotent
    # writes, POST/PATCH are non-idempotent writes; built-ins: their own contract).
    effect = models.CharField(
        max_length=12,
        choices=[("", "derive from the method"), *[(e.value, e.value) for e in Effect]],
        default="",
        blank=True,
    )
    idempotent = models.BooleanField(
        null=True, blank=True, default=None, help_text="Empty: derived from the method."
    )
    requires_approval = models.BooleanField(default=False)
    timeout_s = models.FloatField(default=30.0)
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tool_name_unique_per_tenant")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        self.version += 1
        if kwargs.get("update_fields") is not None:
            kwargs["update_fields"] = {*kwargs["update_fields"], "version", "updated_at"}
        super().save(*args, **kwargs)

    def clean(self) -> None:
        from tools.definitions import validate_definition

        if not 0 < self.timeout_s <= 3600:
            raise ValidationError({"timeout_s": "Must be between 0 and 3600 seconds."})
        validate_definition(self)
