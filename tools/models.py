"""Tenant tool definitions (built-in aliases and HTTP tools declared in configuration) and
MCP server connections (context providers)."""

from __future__ import annotations

import re

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from base.config_checks import ConfigObject
from base.encryption import EncryptedTextField
from base.secret_destinations import SecretDestination
from tenancy.models import Tenant
from tools.context_providers import Domain, Health, ProviderHealth, domains_field
from tools.definition_checks import examples_problem, mcp_examples_problem
from tools.runtime.tool import NAME_PATTERN, Effect


class ToolKind(models.TextChoices):
    BUILTIN = "builtin", "Built-in"
    HTTP = "http", "HTTP API call"


MAX_RATE_LIMIT_PER_MINUTE = 100_000


def validate_rate_limit(value: int | None) -> None:
    """The one check of a tool's rate limit, for the admin, the config pages and REST alike
    (each runs the model's validation)."""
    if value is not None and not 1 <= value <= MAX_RATE_LIMIT_PER_MINUTE:
        raise ValidationError(
            f"Give a whole number of calls per minute from 1 to {MAX_RATE_LIMIT_PER_MINUTE:,}, "
            "or leave it empty for no limit."
        )


class ToolDefinition(ConfigObject, SecretDestination, models.Model):
    """One tool in a tenant's registry. Its full_clean compiles the tenant's configuration
    with it (`base.config_checks`).

    A definition named like a built-in replaces it for this tenant (or hides it, when
    disabled). `version` grows on every save; registries are rebuilt when it changes.
    """

    secret_field, secret_label = "secret", "secret"
    destination_fields = ("kind", "config")

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
    # A plain field, so configuration alone (a form, the API, an import) sets it.
    rate_limit_per_minute = models.IntegerField(
        null=True,
        blank=True,
        validators=[validate_rate_limit],
        help_text="At most this many calls a minute for this tenant, counted across all "
        "processes; further calls get an error the model reads. Empty: no limit.",
    )
    enabled = models.BooleanField(default=True)
    # Inputs another tool's output fills: {"customer_id": {"from": "find_customer", "path":
    # "$.id"}}. Checked as a graph; runs fill them (tools/runtime/frames.py).
    depends_on = models.JSONField(default=dict, blank=True)
    # Examples with what their result should be, the tool's self-tests
    # (tools/runtime/expectations.py): [{"arguments": {...}, "expect": {"contains": "..."}}].
    examples = models.JSONField(default=list, blank=True)
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

    def destination_url(self) -> str:
        """An HTTP tool's URL (where its credential goes); "" for a built-in."""
        config = self.config if isinstance(self.config, dict) else {}
        url = config.get("url") if self.kind == ToolKind.HTTP else ""
        return url if isinstance(url, str) else ""

    def clean(self) -> None:
        """The definition's own fields; everything else a save must pass is checked by the
        configuration compiler over the tenant's whole configuration (`ConfigObject`)."""
        if moved := self.secret_destination_errors():
            raise ValidationError(moved)
        if not 0 < self.timeout_s <= 3600:
            raise ValidationError({"timeout_s": "Must be between 0 and 3600 seconds."})
        if (problem := examples_problem(self)) is not None:
            raise ValidationError({"examples": problem})


TOOL_PREFIX_PATTERN = r"^[a-z][a-z0-9_]{0,30}$"
CONNECTION_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,49}$"


class McpAuthMode(models.TextChoices):
    NONE = "none", "None"
    HEADER = "header", "Static header"
    OAUTH_TENANT = "oauth_tenant", "OAuth, one account for the tenant"
    OAUTH_USER = "oauth_user", "OAuth, each person connects their own account"


OAUTH_MODES = (McpAuthMode.OAUTH_TENANT, McpAuthMode.OAUTH_USER)


class McpStatus(models.TextChoices):
    UNKNOWN = "unknown", "Not refreshed yet"
    OK = "ok", "OK"
    UNAVAILABLE = "unavailable", "Unavailable"


def default_tool_prefix(name: str) -> str:
    """A valid tool prefix from a connection name: "Acme-CRM 2" -> "acme_crm_2"."""
    prefix = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    if not prefix or not prefix[0].isalpha():
        prefix = f"mcp_{prefix}".rstrip("_")
    return prefix[:31].rstrip("_") or "mcp"


class McpServerConnection(ConfigObject, SecretDestination, models.Model):
    """A remote MCP server a tenant connects as a context provider.

    Its tools join the tenant's registry as `<tool_prefix>__<remote name>`, tagged
    `context` and `context:<name>`; the text of `context_resource_uri`, if set, becomes a
    context block for system prompts. What the registry shows comes from `tools_cache`
    and `context_text`, written by `mcp_connection_refresh` (never by building a
    registry, which makes no network call). An `unavailable` connection contributes
    nothing until a refresh succeeds again.
    """

    secret_field, secret_label = "auth_header", "auth header"
    destination_fields = ("url",)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mcp_connections")
    name = models.CharField(
        max_length=50,
        validators=[
            RegexValidator(
                CONNECTION_NAME_PATTERN,
                "Use 1-50 lower-case letters, digits, _ or -, starting with a letter or digit.",
            )
        ],
        help_text='Short and slug-like, e.g. "crm". Tools are tagged context:<name>.',
    )
    url = models.URLField(
        max_length=500, help_text="The server's streamable HTTP endpoint, e.g. https://host/mcp."
    )
    auth_header = EncryptedTextField(
        null=True,
        blank=True,
        help_text="Sent as the Authorization header: a token (sent as Bearer) or a full "
        "value such as 'Bearer …'. Write-only.",
    )
    # How requests are authorised (tools/mcp_oauth/ for the OAuth modes). "none" and "header"
    # follow the auth header (set: header), so clients that only send the header keep working.
    auth_mode = models.CharField(
        max_length=12, choices=McpAuthMode.choices, default=McpAuthMode.NONE,
        help_text="none, header (the auth header), oauth_tenant (an admin connects one "
        "account for everyone) or oauth_user (each person connects their own).",
    )  # fmt: skip
    oauth_scope = models.CharField(
        max_length=500, blank=True,
        help_text="OAuth scopes to ask for, space-separated. Blank: those the server names.",
    )  # fmt: skip
    oauth_client_id = models.CharField(
        max_length=500, blank=True,
        help_text="A client ID registered with the authorization server beforehand. Blank: "
        "the platform registers itself (or uses its client metadata document).",
    )  # fmt: skip
    enabled = models.BooleanField(default=True)
    tool_prefix = models.CharField(
        max_length=31,
        blank=True,
        validators=[
            RegexValidator(
                TOOL_PREFIX_PATTERN,
                "Use a lower-case letter, then up to 30 lower-case letters, digits or _.",
            )
        ],
        help_text="Tools are named <prefix>__<tool>. Blank: derived from the name.",
    )
    allowed_tool_names = models.JSONField(
        default=list,
        blank=True,
        help_text='Remote tool names to import, e.g. ["search"]. Empty: all.',
    )
    context_resource_uri = models.CharField(
        max_length=500,
        blank=True,
        help_text="Optional: an MCP resource whose text becomes a context block for prompts.",
    )
    # The protocol lists no examples, so the tenant declares its remote tools' self-tests here.
    tool_examples = models.JSONField(
        default=dict,
        blank=True,
        help_text='Self-tests per remote tool: {"search": [{"arguments": {"q": "x"}, '
        '"expect": {"contains": "x"}}]}. Empty: none.',
    )
    timeout_s = models.FloatField(default=30.0, help_text="Bounds each call to the server.")
    domains = domains_field(default=list)
    status = models.CharField(
        max_length=12, choices=McpStatus.choices, default=McpStatus.UNKNOWN, editable=False
    )
    last_error = models.TextField(blank=True, editable=False)
    last_refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    tools_cache = models.JSONField(default=list, blank=True, editable=False)
    context_text = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP server connection"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcp_connection_name_unique"),
            models.UniqueConstraint(
                fields=["tenant", "tool_prefix"], name="mcp_connection_prefix_unique"
            ),
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:  # never the credential
        return f"<McpServerConnection {self.pk} {self.name!r} {self.status}>"

    def save(self, *args, **kwargs) -> None:
        if not self.tool_prefix and self.name:
            self.tool_prefix = default_tool_prefix(self.name)
        if self.auth_mode in (McpAuthMode.NONE, McpAuthMode.HEADER):  # as the header says
            self.auth_mode = McpAuthMode.HEADER if self.auth_header else McpAuthMode.NONE
        super().save(*args, **kwargs)

    def destination_url(self) -> str:
        return self.url or ""

    def clean(self) -> None:
        """The connection's own fields; its URL (http(s), no credentials) is the
        configuration compiler's, checked over the tenant's configuration (`ConfigObject`)."""
        errors: dict[str, str] = self.secret_destination_errors()
        if not self.tool_prefix and self.name:
            self.tool_prefix = default_tool_prefix(self.name)
        names = self.allowed_tool_names
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            errors["allowed_tool_names"] = 'Give a list of tool names, e.g. ["search"], or [].'
        problem = mcp_examples_problem(self.tool_examples, self.tools_cache or [])
        if problem is not None:
            errors["tool_examples"] = problem
        if self.auth_header and any(c in self.auth_header for c in "\r\n"):
            errors["auth_header"] = "The header value must be one line."
        if self.auth_mode == McpAuthMode.NONE and self.auth_header:
            self.auth_mode = McpAuthMode.HEADER
        if self.auth_mode in OAUTH_MODES and self.auth_header:
            errors["auth_header"] = (
                "An OAuth connection sends the token it was given: remove the auth header."
            )
        if self.auth_mode == McpAuthMode.HEADER and not self.auth_header:
            self.auth_mode = McpAuthMode.NONE  # the header cleared: nothing is sent
        if self.auth_mode == McpAuthMode.OAUTH_USER and self.context_resource_uri:
            # Read with one person's token, the text would reach every run of the tenant.
            errors["context_resource_uri"] = (
                "A connection reached with each person's own account has no shared context "
                "resource: clear it, or connect with the tenant's account."
            )
        if any(c in self.oauth_scope + self.oauth_client_id for c in "\r\n\t"):
            errors["oauth_scope"] = "One line, scopes separated by spaces."
        if not 0 < self.timeout_s <= 300:
            errors["timeout_s"] = "Between 0 and 300 seconds."
        if errors:
            raise ValidationError(errors)

    @property
    def uses_oauth(self) -> bool:
        return self.auth_mode in OAUTH_MODES

    @property
    def tool_count(self) -> int:
        return len(self.tools_cache or [])

    @property
    def health(self) -> ProviderHealth:
        """The last refresh, as a context provider's health: a refresh is the check."""
        status = {McpStatus.OK: Health.OK, McpStatus.UNAVAILABLE: Health.FAILING}.get(
            self.status, Health.UNKNOWN
        )
        reason = self.last_error if status == Health.FAILING else ""
        return ProviderHealth(str(status), reason, self.last_refreshed_at)

    def get_domains_display(self) -> list[str]:
        return [Domain(d).label for d in self.domains or () if d in Domain.values]


class ToolHealthStatus(models.TextChoices):
    PASSING = "passing", "Passing"
    FAILING = "failing", "Failing"
    SKIPPED = "skipped", "Not run"  # every example writes and none is marked safe to run


class ToolHealth(models.Model):
    """A tool's latest self-test (agents/selftests.py): each example's outcome, and the
    tool's status from them. One row per tool of a tenant, replaced by each run."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    tool_name = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=ToolHealthStatus.choices)
    results = models.JSONField(default=list)  # [{name, status, detail, latency_ms}]
    checked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "tool_name"], name="tool_health_unique")
        ]

    def __str__(self) -> str:
        return f"{self.tool_name}: {self.status}"


# The OAuth concern's models live in its package; imported here so that Django finds them.
from tools.mcp_oauth.models import McpOAuthClient, McpOAuthToken  # noqa: E402, F401
