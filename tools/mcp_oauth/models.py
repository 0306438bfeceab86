"""What the platform keeps of an MCP server's OAuth: the client it is at the server's
authorization server, and the tokens it was given (one for the tenant, or one per person).
Every secret is encrypted at rest (base.encryption); none is ever shown."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from base.encryption import EncryptedTextField
from tenancy.models import Tenant


class ClientSource(models.TextChoices):
    REGISTERED = "registered", "Registered dynamically (RFC 7591)"
    METADATA_DOCUMENT = "metadata_document", "Client ID metadata document"
    CONFIGURED = "configured", "Client ID given by the admin"


class McpOAuthClient(models.Model):
    """The authorization server a connection's server named (discovered at the last
    connect) and who the platform is there. Replaced when the server names another one."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    connection = models.OneToOneField(
        "tools.McpServerConnection", on_delete=models.CASCADE, related_name="oauth_client"
    )
    issuer = models.URLField(max_length=500)
    authorization_endpoint = models.URLField(max_length=500)
    token_endpoint = models.URLField(max_length=500)
    revocation_endpoint = models.URLField(max_length=500, blank=True)
    resource = models.URLField(max_length=500)  # RFC 8707: what tokens are asked for
    scope = models.CharField(max_length=500, blank=True)
    redirect_uri = models.URLField(max_length=500)
    source = models.CharField(max_length=20, choices=ClientSource.choices)
    client_id = models.CharField(max_length=500)
    client_secret = EncryptedTextField(null=True, blank=True)
    auth_method = models.CharField(max_length=30, default="none")  # at the token endpoint
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.client_id} at {self.issuer}"

    def __repr__(self) -> str:  # never the secret
        return f"<McpOAuthClient {self.pk} {self.issuer}>"


class McpOAuthToken(models.Model):
    """A token a connection's authorization server issued: the tenant's (user None, for an
    `oauth_tenant` connection) or one person's (`oauth_user`). Refreshed before it expires,
    under this row's lock (tools.mcp_oauth.tokens)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    connection = models.ForeignKey(
        "tools.McpServerConnection", on_delete=models.CASCADE, related_name="oauth_tokens"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="+",
    )  # fmt: skip
    connected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    issuer = models.URLField(max_length=500)
    # The resource (RFC 8707) it was issued for: its client's at the time; a token whose
    # issuer or resource is not the connection's current client's is never sent.
    resource = models.URLField(max_length=500, blank=True)
    access_token = EncryptedTextField()
    refresh_token = EncryptedTextField(null=True, blank=True)
    token_type = models.CharField(max_length=20, default="Bearer")
    scope = models.CharField(max_length=500, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["connection", "user"],
                condition=models.Q(user__isnull=False),
                name="mcp_oauth_token_per_user",
            ),
            models.UniqueConstraint(
                fields=["connection"],
                condition=models.Q(user__isnull=True),
                name="mcp_oauth_token_per_tenant",
            ),
        ]

    def __str__(self) -> str:
        return f"token of connection {self.connection_id} ({self.user_id or 'the tenant'})"

    def __repr__(self) -> str:  # never the tokens
        return f"<McpOAuthToken {self.pk} connection={self.connection_id} user={self.user_id}>"

    def expires_within(self, seconds: float) -> bool:
        """Does it expire within `seconds` (False when the server gave no lifetime)?"""
        if self.expires_at is None:
            return False
        return self.expires_at <= timezone.now() + timedelta(seconds=seconds)
