"""Tenants, who belongs to them, and the API keys that act for them."""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import available_timezones

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from base.encryption import EncryptedTextField
from tenancy.sign_on.sso_settings import issuer_problem, setting_slugs

slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$",
    "Use 1-50 lowercase letters, digits and inner hyphens.",
)


@lru_cache(maxsize=1)
def time_zone_names() -> frozenset[str]:
    """The IANA zone names this machine knows (its tz database), but not "localtime" (the
    server's own, whatever it is)."""
    return frozenset(available_timezones() - {"localtime"})


def validate_time_zone(value: str) -> None:
    if value not in time_zone_names():
        raise ValidationError(
            "Give an IANA time zone name, such as Europe/Lisbon, America/New_York or UTC.",
            code="invalid_time_zone",
        )


class Tenant(models.Model):
    slug = models.SlugField(max_length=50, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    # The tenant's configuration policy (docs/configuration-as-code.md): every tool that
    # writes (effect write or destructive) must ask for confirmation before it runs.
    require_confirmation_for_writes = models.BooleanField(
        default=False,
        help_text="Refuse a write or destructive tool that does not require confirmation.",
    )
    # Off: the tenant's members sign in only through single sign-on (docs/sso.md); their
    # API keys still work.
    password_sign_in = models.BooleanField(
        default=True,
        verbose_name="password sign-in",
        help_text="Members may sign in with a password. Off: single sign-on only "
        "(API keys keep working).",
    )
    # Where the tenant's days and months begin: its quotas' periods (docs/quotas.md).
    time_zone = models.CharField(
        max_length=64,
        default="UTC",
        validators=[validate_time_zone],
        verbose_name="time zone",
        help_text="An IANA name (Europe/Lisbon, America/New_York, UTC): where the days and "
        "months of its quotas begin.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Higher rank includes everything a lower one may do.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}
ADMIN_ROLES = (Role.OWNER, Role.ADMIN)


class Membership(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # The identity provider (its slug) whose groups made this membership: single sign-on
    # removes only memberships it made when the groups no longer grant them. Blank: made
    # otherwise (invitation, admin, command).
    sso_provider = models.CharField(max_length=50, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_per_pair")
        ]
        ordering = ["tenant__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]


class Scope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write data (conversations, documents, facts)"
    RUN = "run", "Run agents and tools"
    CONFIG = "config", "Change configuration (tools, connections, agents, crews, knowledge bases)"
    ADMIN = "admin", "Administer the tenant (members, keys, audit log, and all of the above)"


# What `ApiKey.effective_role` reads of a key's creator (ApiKeyQuerySet annotates them).
CREATOR_STANDING = ("creator_role", "creator_active", "creator_superuser")


class ApiKeyQuerySet(models.QuerySet):
    def with_creator_standing(self) -> ApiKeyQuerySet:
        """Each key with what `ApiKey.effective_role` reads of its creator now: their role
        in the key's tenant, whether their account is active, whether a superuser. In the
        same query (a subquery and a join), no query more."""
        role = Membership.objects.filter(
            tenant_id=models.OuterRef("tenant_id"), user_id=models.OuterRef("created_by_id")
        ).values("role")[:1]
        return self.annotate(
            creator_role=models.Subquery(role),
            creator_active=models.F("created_by__is_active"),
            creator_superuser=models.F("created_by__is_superuser"),
        )


class ApiKey(models.Model):
    """A tenant API key. Only `prefix` and a SHA-256 of the whole key are stored.

    Who stands behind it: `created_by`, the person whose role caps it (for a key made with a
    key, the person behind that key: the cap and the revocation follow the human at the
    root of the chain), and `created_by_key`, the key that made it, if one did. Neither:
    the operator's key (`create_api_key`), which acts with its `role` alone."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    scopes = ArrayField(models.CharField(max_length=10, choices=Scope.choices), default=list)
    # The creator's role when the key was made: the key never does more than it allowed.
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.OWNER)
    # Optional limits: slugs of the agents and crews, names of the tools it may run.
    allowed_agents = ArrayField(models.CharField(max_length=50), default=list, blank=True)
    allowed_tools = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    # May name a member (OpenAI's `user`) whose run it starts: theirs to see, with their
    # memory and grants. Only an owner's or admin's key.
    acts_for_members = models.BooleanField(default=False)
    # Deleting the account revokes its keys first (tenancy.api_keys): SET_NULL never turns
    # a person's key into one that looks like the operator's.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="keys_made",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_usable(self) -> bool:
        """Not revoked, not expired, its tenant active, and its creator still behind it
        (`effective_role`)."""
        now = timezone.now()
        return (
            self.revoked_at is None
            and (self.expires_at is None or self.expires_at > now)
            and self.tenant.active
            and self.effective_role is not None
        )

    @property
    def effective_role(self) -> str | None:
        """The most the key may do now: `role` (the cap set when it was made), lowered to
        its creator's current role in the tenant (a superuser who is not a member counts as
        an owner, as when the key was made). None when the creator's account is inactive
        or they are no longer a member: the key is unusable. The operator's keys (no
        creator) act with `role`.

        Reads the annotations of `ApiKey.objects.with_creator_standing()` (what
        `find_usable_key` loads); a key loaded otherwise costs one query, once
        (`read_creator_standing`)."""
        if self.created_by_id is None:
            return self.role
        if self.pk is None:
            return None
        if not hasattr(self, "creator_role"):
            self.read_creator_standing()
        if not self.creator_active:
            return None
        creator = self.creator_role or (Role.OWNER if self.creator_superuser else None)
        if creator is None:
            return None
        return min(Role(self.role), Role(creator), key=ROLE_RANK.__getitem__)

    def read_creator_standing(self) -> None:
        """Read what `effective_role` needs of the creator now (one query), as the
        annotations of `with_creator_standing` would have it."""
        standing = (
            ApiKey.objects.with_creator_standing()
            .filter(pk=self.pk)
            .values(*CREATOR_STANDING)
            .first()
        ) or {"creator_role": None, "creator_active": False, "creator_superuser": False}
        for name, value in standing.items():
            setattr(self, name, value)

    def refresh_from_db(self, *args, **kwargs) -> None:
        super().refresh_from_db(*args, **kwargs)
        for name in CREATOR_STANDING:  # read again when next asked
            self.__dict__.pop(name, None)

    @property
    def made_by(self) -> str:
        """Who made it, for lists: the creator's username, "key <name>" (with the person
        behind that key, if any: "key ci (alice)"), or "operator". Reads `created_by` and
        `created_by_key` (select them with the key)."""
        person = self.created_by.get_username() if self.created_by_id is not None else ""
        if self.created_by_key_id is not None:
            maker = f"key {self.created_by_key.name}"
            return f"{maker} ({person})" if person else maker
        return person or "operator"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes


class TenantGroup(models.Model):
    """A named group of a tenant's members, for use grants and approval authority. Backed by
    a Django auth Group (named `<tenant id>:<name>`) so django-guardian's group object
    permissions work; its users are the group's members."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="groups")
    name = models.CharField(max_length=100)
    group = models.OneToOneField(
        "auth.Group", on_delete=models.CASCADE, related_name="tenant_group"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tenant_group_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class InvitationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    ACCEPTED = "accepted", "Accepted"
    DECLINED = "declined", "Declined"
    REVOKED = "revoked", "Revoked"
    EXPIRED = "expired", "Expired"


class Invitation(models.Model):
    """An offer of membership that the invited person accepts while signed in. Only a
    SHA-256 of the token is stored; the accept link is shown (and mailed) once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    invitee = models.CharField(max_length=254, help_text="A username or an e-mail address.")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    declined_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.invitee} to {self.tenant} ({self.role})"

    @property
    def status(self) -> str:
        if self.accepted_at:
            return InvitationStatus.ACCEPTED
        if self.declined_at:
            return InvitationStatus.DECLINED
        if self.revoked_at:
            return InvitationStatus.REVOKED
        if self.expires_at <= timezone.now():
            return InvitationStatus.EXPIRED
        return InvitationStatus.PENDING


# -- single sign-on (tenancy/sign_on/sso.py, agentplatform/web/sso/) -----------------
class IdentityProvider(models.Model):
    """An OpenID Connect provider members sign in with: a tenant's own, or platform-wide
    (tenant empty; only a platform superuser manages those). Providers may also come from
    the SSO_PROVIDERS setting; both are read through `tenancy.sso.providers`."""

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="identity_providers",
        help_text="Empty: platform-wide (its group rules may name any tenant).",
    )
    slug = models.SlugField(
        max_length=50, unique=True, validators=[slug_validator], help_text="In the sign-in URL."
    )
    name = models.CharField(max_length=100, help_text='Shown as "Sign in with <name>".')
    issuer = models.URLField(
        max_length=500,
        help_text="The issuer URL; its /.well-known/openid-configuration is read.",
    )
    client_id = models.CharField(max_length=255)
    client_secret = EncryptedTextField(blank=True, null=True)
    scopes = models.CharField(max_length=300, default="openid email profile")
    groups_claim = models.CharField(
        max_length=100,
        default="groups",
        blank=True,
        help_text="The ID token or userinfo claim listing the user's groups.",
    )
    default_role = models.CharField(
        max_length=10,
        choices=Role.choices,
        blank=True,
        help_text="A tenant's provider: the role of a user no group rule matches "
        "(empty: no membership).",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "identity provider"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = {}
        if self.slug in setting_slugs():
            errors["slug"] = "The SSO_PROVIDERS setting already uses this slug."
        problem = issuer_problem(self.issuer) if self.issuer else None
        if problem:
            errors["issuer"] = problem
        if errors:
            raise ValidationError(errors)


class IdentityProviderGroup(models.Model):
    """A group rule: members of `group` at the provider get `role` in `tenant`."""

    provider = models.ForeignKey(IdentityProvider, on_delete=models.CASCADE, related_name="rules")
    group = models.CharField(max_length=255)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "group", "tenant"], name="identity_provider_group_unique"
            )
        ]
        ordering = ["group"]
        verbose_name = "group rule"

    def __str__(self) -> str:
        return f"{self.group} -> {self.tenant} ({self.role})"

    def clean(self) -> None:
        provider_tenant = self.provider.tenant_id if self.provider_id else None
        if provider_tenant is not None and self.tenant_id not in (None, provider_tenant):
            raise ValidationError(
                {"tenant": "A tenant's provider gives roles in that tenant only."}
            )


class ExternalIdentity(models.Model):
    """Who a user is at an identity provider: the ID token's issuer and subject. A user is
    found by this pair only, never by e-mail (another tenant's provider could claim any
    address)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    provider = models.CharField(max_length=50)  # the slug it was first seen through
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="external_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


# -- the audit log (recorded by tenancy/records/audit.py) ----------------------------
class AuditAction(models.TextChoices):
    SIGNIN_SUCCEEDED = "signin.succeeded", "Signed in"
    SIGNIN_FAILED = "signin.failed", "Sign-in failed"
    CONFIG_CREATED = "config.created", "Configuration created"
    CONFIG_CHANGED = "config.changed", "Configuration changed"
    CONFIG_DELETED = "config.deleted", "Configuration deleted"
    GRANT_ADDED = "grant.added", "Permission granted"
    GRANT_REMOVED = "grant.removed", "Permission removed"
    MEMBER_ADDED = "member.added", "Member added"
    MEMBER_CHANGED = "member.changed", "Member's role changed"
    MEMBER_REMOVED = "member.removed", "Member removed"
    API_KEY_CREATED = "api_key.created", "API key created"
    API_KEY_REVOKED = "api_key.revoked", "API key revoked"
    APPROVAL_DECIDED = "approval.decided", "Approval decided"
    RUN_STARTED_BY_KEY = "run.started_by_key", "Run started with an API key"
    RUN_RESUMED = "run.resumed", "Failed run resumed"
    FACT_REMEMBERED = "fact.remembered", "Fact remembered"
    FACT_EDITED = "fact.edited", "Fact edited"
    FACT_FORGOTTEN = "fact.forgotten", "Fact forgotten"
    FACTS_EXPIRED = "facts.expired", "Expired facts purged"
    MCP_ACCOUNT_CONNECTED = "mcp_account.connected", "MCP server account connected"
    MCP_ACCOUNT_DISCONNECTED = "mcp_account.disconnected", "MCP server account disconnected"
    RETENTION_PURGED = "retention.purged", "Data past its retention purged"
    LEGAL_HOLD_PLACED = "legal_hold.placed", "Legal hold placed"
    LEGAL_HOLD_LIFTED = "legal_hold.lifted", "Legal hold lifted"
    EXPORT_REQUESTED = "export.requested", "Workspace export requested"
    EXPORT_DOWNLOADED = "export.downloaded", "Workspace export downloaded"


class AppendOnly(Exception):
    """Audit entries are never changed or deleted (the database refuses it too)."""


class AuditEntryQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnly("Audit entries cannot be changed.")

    def delete(self):
        raise AppendOnly("Audit entries cannot be deleted.")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnly("Audit entries cannot be changed.")


class AuditEntry(models.Model):
    """One thing that happened in a tenant. Append-only: the ORM refuses updates and
    deletes (this model, its default manager), and a trigger of migration 0002 refuses
    them in the database (see there for the two exceptions it allows)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_entries")
    at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=40, choices=AuditAction.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)  # kept when user/key go
    object_type = models.CharField(max_length=100, blank=True)  # an app label: agents.agent
    object_id = models.CharField(max_length=100, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)  # {field: [before, after]}
    ip = models.GenericIPAddressField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-at"], name="audit_tenant_at"),
            models.Index(fields=["tenant", "-id"], name="audit_tenant_id"),
        ]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} by {self.actor_label or '-'}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnly("Audit entries cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnly("Audit entries cannot be deleted.")


# -- OAuth for MCP clients (tenancy/sign_on/oauth.py) -------------------------------------
class OAuthClient(models.Model):
    """An MCP client registered itself (dynamic client registration): public, PKCE only."""

    client_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    redirect_uris = ArrayField(models.CharField(max_length=2000))
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name or self.client_id


class OAuthGrant(models.Model):
    """An authorization code a member gave a client for one tenant: single use, short-lived,
    bound to the client, redirect URI and PKCE challenge. Stored only as a hash."""

    code_hash = models.CharField(max_length=64, unique=True)
    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    redirect_uri = models.CharField(max_length=2000)
    code_challenge = models.CharField(max_length=128)
    # How the member's session signed in ("password", "sso:<slug>"): a grant made in a
    # password session acts only in tenants that allow passwords ("" on grants from before).
    sign_in_method = models.CharField(max_length=60, blank=True, default="")
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"OAuth code {self.pk} for {self.client}"


class OAuthToken(models.Model):
    """An access token (and its refresh token) of a member for one tenant, by a client.
    Both stored only as hashes; a refresh replaces the token (rotation)."""

    access_hash = models.CharField(max_length=64, unique=True)
    refresh_hash = models.CharField(max_length=64, unique=True)
    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    sign_in_method = models.CharField(max_length=60, blank=True, default="")  # its grant's
    expires_at = models.DateTimeField()
    refresh_expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"OAuth token {self.pk} for {self.client}"


# -- configuration history (tenancy/records/history.py) ------------------------------------
class ConfigVersion(models.Model):
    """One saved state of a configured object (agent, crew, tool definition, provider or MCP
    connection, knowledge base): its number (1, 2, ... per object), who and when, the full
    snapshot of its editable fields (secrets only as "[set]"), and what changed against the
    version before. Written by `history.record` in the transaction of the change; never
    changed afterwards. Kept when the object is deleted (the audit log says so)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    object_type = models.CharField(max_length=100)  # an app label: agents.agent
    object_id = models.CharField(max_length=100)
    object_repr = models.CharField(max_length=200, blank=True)
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)  # kept when user/key go
    snapshot = models.JSONField(default=dict)  # {"fields": {...}, "parts": {...}}
    changes = models.JSONField(default=dict, blank=True)  # {name: [before, after]}
    restored_from = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "object_type", "object_id", "number"],
                name="config_version_number_unique",
            )
        ]
        verbose_name = "configuration version"

    def __str__(self) -> str:
        return f"{self.object_repr or self.object_type} v{self.number}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnly("Configuration versions cannot be changed.")
        super().save(*args, **kwargs)
