"""A tenant's connections to model providers. API keys are encrypted and write-only."""

from __future__ import annotations

import re

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from base.config_checks import ConfigObject
from base.encryption import EncryptedTextField
from base.secret_destinations import SecretDestination
from providers.runtime.presets import PRESETS
from providers.runtime.price_rules import (
    PRICE_FIELDS,
    PRICE_KINDS,
    model_refusal,
    price_refusal,
)
from tenancy.models import Tenant

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_RESERVED_HEADERS = {"authorization", "x-api-key", "host", "content-length", "cookie"}


class ProviderKind(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible"
    OFFLINE = "offline", "Offline demo (no model)"


class HealthStatus(models.TextChoices):
    UNKNOWN = "unknown", "Not checked"
    OK = "ok", "OK"
    FAILING = "failing", "Failing"


class LoadBalancing(models.TextChoices):
    OFF = "", "Off: the agent's connection first"
    ROUND_ROBIN = "round_robin", "Round robin"
    LEAST_IN_FLIGHT = "least_in_flight", "Least in flight"


MAX_FALLBACKS = 10


def fallbacks_problem(value: object) -> str | None:
    """Why `value` is not a list of fallbacks ({"connection": name, "model": text}), or
    None. The connections they name are the configuration compiler's to check."""
    if not isinstance(value, list):
        return 'Give a list of {"connection": "<name>", "model": "<model>"}.'
    if len(value) > MAX_FALLBACKS:
        return f"At most {MAX_FALLBACKS} fallbacks."
    for entry in value:
        if (
            not isinstance(entry, dict)
            or set(entry) - {"connection", "model"}
            or not isinstance(entry.get("connection"), str)
            or not entry["connection"].strip()
            or not isinstance(entry.get("model", ""), str)
        ):
            return 'Each fallback is {"connection": "<name>", "model": "<model>"}.'
    return None


# Where a connection without a base URL sends its key (the SDKs' defaults).
_DEFAULT_BASE_URLS = {
    ProviderKind.ANTHROPIC: "https://api.anthropic.com",
    ProviderKind.OPENAI: PRESETS["openai"].base_url,
}


class ProviderConnection(ConfigObject, SecretDestination, models.Model):
    secret_field, secret_label = "api_key", "API key"
    destination_fields = ("kind", "preset", "base_url")

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="provider_connections"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=ProviderKind.choices)
    preset = models.CharField(
        max_length=20,
        blank=True,
        choices=[(p.name, p.label) for p in PRESETS.values() if p.name != "openai"],
        help_text="For OpenAI-compatible services: which one (base URL and quirks).",
    )
    base_url = models.URLField(blank=True, help_text="Leave blank for the service's default.")
    api_key = EncryptedTextField(null=True, blank=True)
    extra_headers = models.JSONField(
        default=dict, blank=True, help_text="Sent with every request; not for credentials."
    )
    default_model = models.CharField(max_length=200, blank=True)
    allowed_models = ArrayField(
        models.CharField(max_length=200), default=list, blank=True, help_text="Empty: any."
    )
    timeout_s = models.FloatField(default=60.0)
    max_retries = models.PositiveSmallIntegerField(default=3)
    is_default = models.BooleanField(default=False)
    health_status = models.CharField(
        max_length=10, choices=HealthStatus.choices, default=HealthStatus.UNKNOWN, editable=False
    )
    health_message = models.TextField(blank=True, editable=False)
    last_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="provider_name_unique"),
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(is_default=True), name="one_default_provider"
            ),
        ]
        ordering = ["-is_default", "name"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:  # never the key
        return f"<ProviderConnection {self.pk} {self.kind} {self.name!r}>"

    @property
    def price_kind(self) -> str:
        """Which price table its models are in (providers.pricing): its kind, or for an
        OpenAI-compatible service its preset."""
        if self.kind in (ProviderKind.ANTHROPIC, ProviderKind.OPENAI, ProviderKind.OFFLINE):
            return str(self.kind)
        return self.preset or "custom"

    def destination_url(self) -> str:
        """Where the API key goes: the base URL, else the service's default."""
        if self.base_url:
            return self.base_url
        if self.kind == ProviderKind.OPENAI_COMPATIBLE:
            preset = PRESETS.get(self.preset or "")
            return preset.base_url if preset else ""
        return _DEFAULT_BASE_URLS.get(self.kind, "")

    def clean(self) -> None:
        """The connection's own fields and its API key; credentials in its base URL or
        headers, a preset on another kind and a default model outside the allowed ones are
        the configuration compiler's, checked over the tenant's configuration
        (`ConfigObject`)."""
        errors: dict[str, str] = self.secret_destination_errors()
        if self.kind == ProviderKind.OPENAI_COMPATIBLE:
            preset = PRESETS.get(self.preset or "")
            if preset is None:
                errors["preset"] = "Choose the OpenAI-compatible service."
            elif not (self.base_url or preset.base_url):
                errors["base_url"] = "This service needs a base URL."
            elif preset.needs_api_key and not self.api_key:
                errors["api_key"] = f"{preset.label} needs an API key."
        elif self.kind in (ProviderKind.ANTHROPIC, ProviderKind.OPENAI) and not self.api_key:
            errors["api_key"] = "An API key is required."
        if not isinstance(self.extra_headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.extra_headers.items()
        ):
            errors["extra_headers"] = 'Give an object of header names to text values: {"X-A": "b"}.'
        else:
            for name in self.extra_headers:
                if not _HEADER_NAME.match(name) or name.lower() in _RESERVED_HEADERS:
                    errors["extra_headers"] = f"{name!r} cannot be set here."
        if not 0 < self.timeout_s <= 600:
            errors["timeout_s"] = "Between 0 and 600 seconds."
        if self.max_retries > 10:
            errors["max_retries"] = "At most 10."
        if errors:
            raise ValidationError(errors)


# Price kinds: Anthropic, OpenAI, then each OpenAI-compatible service by its preset (a
# connection's `price_kind`). Runs record their provider as the adapter names it
# ("openai_compatible:xai"); providers.pricing.price_kind maps that to "xai". The rules of a
# price live in providers/runtime/price_rules.py (the configuration compiler asks them too).


def _price_field(label: str) -> models.DecimalField:
    return models.DecimalField(
        label, max_digits=10, decimal_places=4, help_text="US dollars per million tokens."
    )


class ModelPrice(models.Model):
    """A tenant's price for a model (or every model whose id begins with `model`), which
    overrides the built-in table (providers.pricing.DEFAULT_PRICES) for that entry."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="model_prices")
    provider_kind = models.CharField("provider", max_length=20, choices=PRICE_KINDS)
    model = models.CharField(
        max_length=200,
        help_text="A model id, or its beginning: the longest matching one prices a model "
        "(`gpt-4o` prices `gpt-4o-2024-08-06`, unless `gpt-4o-2024` is listed too).",
    )
    input_price = _price_field("input")
    output_price = _price_field("output")
    cached_input_price = _price_field("cached input")
    cache_write_price = _price_field("cache write")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "provider_kind", "model"],
                name="model_price_unique",
                violation_error_message="This provider and model have a price already: "
                "change that one.",
            )
        ]
        ordering = ["provider_kind", "model"]

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return f"{self.get_provider_kind_display()} {self.model}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        self.model = (self.model or "").strip()
        if refusal := model_refusal(self.model):
            errors["model"] = refusal
        for name in PRICE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue  # the field's own check says it is required
            if refusal := price_refusal(value):
                errors[name] = refusal
        if errors:
            raise ValidationError(errors)


ALIAS_PREFIX = "alias/"  # a gateway model id `alias/<name>` names a tenant's ModelAlias
_ALIAS_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,49}$")
# A gateway call is passed through in one API: an alias's connections all speak it.
_API_OF_KIND = {
    ProviderKind.ANTHROPIC: "messages",
    ProviderKind.OPENAI: "chat",
    ProviderKind.OPENAI_COMPATIBLE: "chat",
}


class ModelAlias(ConfigObject, models.Model):
    """A gateway model the tenant names (`alias/<name>` on /v1): an ordered list of
    connection/model pairs, tried in turn on a retryable failure, those serving the first
    pair's model sharing its load (docs/fallback.md)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="model_aliases")
    name = models.CharField(
        max_length=50, help_text="Called as alias/<name>: lowercase letters, digits, _ . and -."
    )
    targets = models.JSONField(
        default=list,
        help_text='In order: [{"connection": "<name>", "model": "<model>"}, ...]; the first '
        "is tried first.",
    )
    load_balancing = models.CharField(
        max_length=20, choices=LoadBalancing.choices, default=LoadBalancing.OFF, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="model_alias_name_unique")
        ]
        ordering = ["name"]
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return f"{ALIAS_PREFIX}{self.name}"

    def clean(self) -> None:
        """Its name, and targets naming the tenant's own connections (one query), each with a
        model the connection allows, all speaking one API."""
        if not _ALIAS_NAME.match(self.name or ""):
            raise ValidationError({"name": "Lowercase letters, digits, _ . and -; 50 at most."})
        problem = fallbacks_problem(self.targets)
        if problem is None and not self.targets:
            problem = "Name at least one connection and model."
        if problem is not None:
            raise ValidationError({"targets": problem})
        names = {t["connection"] for t in self.targets}
        found = {
            c.name: c
            for c in ProviderConnection.objects.filter(tenant_id=self.tenant_id, name__in=names)
        }
        apis = set()
        for position, target in enumerate(self.targets):
            connection = found.get(target["connection"])
            where = f"[{position}]"
            if connection is None:
                problem = f"{where}.connection: unknown connection {target['connection']!r}"
            elif connection.kind not in _API_OF_KIND:
                problem = f"{where}.connection: the offline demo has no model to call"
            elif not (target.get("model") or connection.default_model):
                problem = f"{where}.model: name the model (the connection has no default)"
            elif connection.allowed_models and (
                (target.get("model") or connection.default_model) not in connection.allowed_models
            ):
                problem = f"{where}.model: the connection does not allow this model"
            else:
                apis.add(_API_OF_KIND[connection.kind])
                continue
            raise ValidationError({"targets": problem})
        if len(apis) > 1:
            raise ValidationError(
                {"targets": "Anthropic and OpenAI(-compatible) connections cannot be mixed: "
                 "a gateway call is passed through in its own API."}
            )  # fmt: skip
