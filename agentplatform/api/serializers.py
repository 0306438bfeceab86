"""Input and output schemas of the resource endpoints.

Secrets (provider API keys, tool secrets, remote agents' tokens) are write-only: requests
may set them (omit: keep; null or "": clear), responses only say `has_...`.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentplatform.api.resources import (
    CleanModelSerializer,
    JSONObjectField,
    StrictSerializer,
)
from agents import publishing, skills
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    AgentDraft,
    Conversation,
    ConversationSummary,
    Crew,
    Dataset,
    DraftStatus,
    Fact,
    Message,
)
from agents.selectors import agents_named, crew_members
from agents.services import agent_save, conversation_save, crew_save
from providers.models import ModelAlias, ProviderConnection
from providers.services import connection_save, model_alias_save
from tenancy.models import (
    ApiKey,
    Invitation,
    InvitationStatus,
    Membership,
    Role,
    Scope,
    Tenant,
    TenantGroup,
)
from tenancy.selectors import tenant_rows
from tools.context_providers import Domain, Health
from tools.mcp_connections import mcp_connection_save
from tools.models import McpServerConnection, ToolDefinition, ToolKind
from tools.runtime.tool import Effect
from tools.services import tool_definition_save

MAX_TEXT = 100_000  # instructions and other long texts
MAX_DESCRIPTION = 10_000
MAX_SECRET = 10_000
MAX_LIST = 200
MAX_CREW_MEMBERS = 50


def _has_no_nul(value: str) -> None:
    if "\x00" in value:
        raise serializers.ValidationError("Text may not contain NUL characters.")


class TenantPrimaryKeyField(serializers.PrimaryKeyRelatedField):
    """An id among the request tenant's rows; another tenant's id is "does not exist"."""

    def get_queryset(self) -> models.QuerySet:
        return tenant_rows(super().get_queryset(), tenant=self.context["tenant"])


class TenantSlugField(serializers.SlugRelatedField):
    """A slug among the request tenant's rows."""

    def get_queryset(self) -> models.QuerySet:
        return tenant_rows(super().get_queryset(), tenant=self.context["tenant"])

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not data or len(data) > 50:
            self.fail("invalid")
        _has_no_nul(data)
        return super().to_internal_value(data)


class SecretField(serializers.CharField):
    """Write-only; "" means the same as null (clear it)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(
            write_only=True,
            required=False,
            allow_null=True,
            allow_blank=True,
            trim_whitespace=False,
            max_length=MAX_SECRET,
        )
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str | None:
        value = super().to_internal_value(data)
        return value or None


def _text_list(max_item: int, **extra: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=max_item),
        required=False,
        max_length=MAX_LIST,
        **extra,
    )


# -- agents ------------------------------------------------------------------------------
class AgentSkillsField(serializers.ListField):
    """The agent's skills: `name@N` (a version) or `name@latest` (its latest approved)."""

    def get_attribute(self, agent: Agent) -> list[str]:
        return skills.pin_labels_of(agent)  # prefetched in a list (`agents_listed`)


class DraftSerializer(serializers.Serializer):
    """A change to an agent or crew with a required evaluation (agents/publishing.py)."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=DraftStatus.choices)
    changes = serializers.DictField(help_text="{field: [live value, drafted value]}")
    evaluation = serializers.IntegerField(allow_null=True)
    score = serializers.FloatField(allow_null=True, help_text="Cases passed / cases.")
    threshold = serializers.FloatField()
    live_score = serializers.FloatField(
        allow_null=True, help_text="The live version's last score on the same dataset."
    )
    note = serializers.CharField()
    proposed_by = serializers.CharField()
    decided_by = serializers.CharField()
    reason = serializers.CharField()
    published_version = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)


def draft_shown(agent: Agent | Crew, draft: AgentDraft | None) -> dict[str, Any] | None:
    """A draft as REST shows it (one query: the live version's score)."""
    if draft is None:
        return None
    return DraftSerializer(
        {
            "id": draft.pk,
            "status": draft.status,
            "changes": draft.changes,
            "evaluation": draft.evaluation_id,
            "score": draft.score,
            "threshold": draft.threshold,
            "live_score": publishing.live_score(agent),
            "note": draft.note,
            "proposed_by": draft.actor_label,
            "decided_by": draft.decided_by_label,
            "reason": draft.reason,
            "published_version": draft.published_version,
            "created_at": draft.created_at,
            "decided_at": draft.decided_at,
        }
    ).data


class AgentSerializer(CleanModelSerializer):
    provider_connection = TenantPrimaryKeyField(
        queryset=ProviderConnection.objects.all(),
        required=False,
        allow_null=True,
        help_text="Id of one of this tenant's provider connections; null: the default.",
    )
    output_schema = JSONObjectField(
        required=False, allow_null=True, help_text="JSON Schema of a structured answer."
    )
    compaction_connection = TenantPrimaryKeyField(
        queryset=ProviderConnection.objects.all(),
        required=False,
        allow_null=True,
        help_text="Id of one of this tenant's provider connections that summarises long "
        "conversations; null: the agent's own.",
    )
    tool_names = _text_list(64)
    tool_tags = _text_list(40)
    tool_exclude = _text_list(64)
    remote_token = SecretField(help_text="For the remote kind. Write-only.")
    has_remote_token = serializers.SerializerMethodField()
    approval_group = TenantSlugField(
        slug_field="name",
        queryset=TenantGroup.objects.all(),
        required=False,
        allow_null=True,
        help_text="With approval_deciders 'group': the name of the group whose members decide.",
    )
    skills = AgentSkillsField(
        child=serializers.CharField(max_length=80),
        required=False,
        max_length=MAX_LIST,
        help_text="Approved skills it uses: `name@N`, or `name@latest` (docs/skills.md).",
    )
    required_evaluation = TenantPrimaryKeyField(
        queryset=Dataset.objects.all(),
        required=False,
        allow_null=True,
        help_text="Id of a dataset every change must pass (pass_threshold) before it goes "
        "live: a change is saved as a draft and evaluated (docs/evaluations.md).",
    )
    draft = serializers.SerializerMethodField(
        help_text="The pending draft (a change awaiting its evaluation or a decision), its "
        "score beside the live version's last score; null: none."
    )

    class Meta:
        model = Agent
        fields = [
            "slug",
            "name",
            "description",
            "instructions",
            "provider_connection",
            "model",
            "fallbacks",
            "load_balancing",
            "temperature",
            "compaction_threshold",
            "compaction_connection",
            "compaction_model",
            "max_rounds",
            "max_tool_calls",
            "max_tokens_per_run",
            "use_all_tools",
            "tool_names",
            "tool_tags",
            "tool_exclude",
            "approval_policy",
            "approval_deciders",
            "approval_group",
            "approval_not_starter",
            "memory",
            "memory_scope",
            "memory_retention_days",
            "memory_key_runs",
            "results_without_tools",
            "code_mode",
            "verifier_tool",
            "output_schema",
            "skills",
            "kind",
            "remote_url",
            "remote_command",
            "remote_token",
            "has_remote_token",
            "remote_healthy",
            "remote_health_detail",
            "remote_health_checked_at",
            "active",
            "required_evaluation",
            "pass_threshold",
            "draft",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "version", "created_at", "updated_at",
            "remote_healthy", "remote_health_detail", "remote_health_checked_at",
        ]  # fmt: skip
        extra_kwargs = {
            "description": {"max_length": MAX_DESCRIPTION},
            "instructions": {"max_length": MAX_TEXT},
        }

    def get_has_remote_token(self, agent: Agent) -> bool:
        return bool(agent.remote_token)

    @extend_schema_field(DraftSerializer(allow_null=True))
    def get_draft(self, agent: Agent) -> dict[str, Any] | None:
        if agent.required_evaluation_id is None:  # no query for an agent without the gate
            return None
        return draft_shown(agent, publishing.pending_draft(agent))

    def save_with_service(
        self, tenant: Tenant, agent: Agent | None, changes: dict[str, Any]
    ) -> Agent:
        pins = changes.pop("skills", None)  # absent: the pins stay as they are
        parsed = None if pins is None else [skills.parse_pin(pin) for pin in pins]
        by = self.context["principal"]
        return agent_save(tenant=tenant, agent=agent, changes=changes, pins=parsed, by=by)


class CrewMembersField(serializers.ListField):
    """The crew's agents, in order, by slug."""

    def get_attribute(self, crew: Crew) -> list[str]:
        return [agent.slug for agent in crew_members(crew)]


class CrewSerializer(CleanModelSerializer):
    manager = TenantSlugField(
        slug_field="slug",
        queryset=Agent.objects.all(),
        required=False,
        allow_null=True,
        help_text="Slug of the manager agent (hierarchical crews).",
    )
    members = CrewMembersField(
        child=serializers.CharField(max_length=50),
        required=False,
        max_length=MAX_CREW_MEMBERS,
        help_text="The member agents' slugs, in order.",
    )
    compaction_connection = TenantPrimaryKeyField(
        queryset=ProviderConnection.objects.all(),
        required=False,
        allow_null=True,
        help_text="Id of one of this tenant's provider connections that summarises long "
        "conversations; null: the tenant's default (a hierarchical crew: its manager's).",
    )
    required_evaluation = TenantPrimaryKeyField(
        queryset=Dataset.objects.all(),
        required=False,
        allow_null=True,
        help_text="Id of a dataset every change must pass (pass_threshold) before it goes "
        "live: a change is saved as a draft and evaluated (docs/evaluations.md).",
    )
    draft = serializers.SerializerMethodField(
        help_text="The pending draft (a change awaiting its evaluation or a decision); null: none."
    )

    class Meta:
        model = Crew
        fields = [
            "slug",
            "name",
            "description",
            "mode",
            "manager",
            "members",
            "max_delegations",
            "max_depth",
            "token_budget",
            "compaction_threshold",
            "compaction_connection",
            "compaction_model",
            "active",
            "required_evaluation",
            "pass_threshold",
            "draft",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]
        extra_kwargs = {"description": {"max_length": MAX_DESCRIPTION}}

    @extend_schema_field(DraftSerializer(allow_null=True))
    def get_draft(self, crew: Crew) -> dict[str, Any] | None:
        if crew.required_evaluation_id is None:  # no query for a crew without the gate
            return None
        return draft_shown(crew, publishing.pending_draft(crew))

    def validate_members(self, slugs: list[str]) -> list[Agent]:
        duplicates = sorted({slug for slug in slugs if slugs.count(slug) > 1})
        if duplicates:
            raise serializers.ValidationError(f"Listed twice: {', '.join(duplicates)}.")
        found = agents_named(tenant=self.context["tenant"], slugs=slugs)
        missing = [slug for slug in slugs if slug not in found]
        if missing:
            raise serializers.ValidationError(f"No such agents here: {', '.join(missing)}.")
        return [found[slug] for slug in slugs]

    def save_with_service(self, tenant: Tenant, crew: Crew | None, changes: dict[str, Any]) -> Crew:
        members = changes.pop("members", None)  # absent: the members stay as they are
        by = self.context["principal"]
        return crew_save(tenant=tenant, crew=crew, changes=changes, members=members, by=by)


# -- tools -------------------------------------------------------------------------------
class ToolDefinitionWriteSerializer(CleanModelSerializer):
    """A tenant tool definition: an HTTP tool, or a built-in's tenant variant (a definition
    named like a built-in replaces it; disabled, it hides it)."""

    input_schema = JSONObjectField(
        required=False, help_text="JSON Schema (an object) of the model's arguments."
    )
    output_schema = JSONObjectField(required=False, allow_null=True)
    config = JSONObjectField(
        required=False,
        help_text='HTTP: {"method", "url", "arguments", "auth", ...}; '
        'built-in variant: {"builtin": "<name>"}.',
    )
    tags = _text_list(40)
    secret = SecretField(help_text="The HTTP tool's credential. Write-only.")

    class Meta:
        model = ToolDefinition
        fields = [
            "name",
            "kind",
            "description",
            "input_schema",
            "output_schema",
            "config",
            "depends_on",
            "examples",
            "secret",
            "tags",
            "effect",
            "idempotent",
            "requires_approval",
            "timeout_s",
            "rate_limit_per_minute",
            "enabled",
        ]
        extra_kwargs = {"description": {"max_length": MAX_DESCRIPTION}}

    def save_with_service(
        self, tenant: Tenant, definition: ToolDefinition | None, changes: dict[str, Any]
    ) -> ToolDefinition:
        return tool_definition_save(tenant=tenant, definition=definition, changes=changes)


class CapabilitySerializer(serializers.Serializer):
    effect = serializers.ChoiceField(choices=[e.value for e in Effect])
    idempotent = serializers.BooleanField()
    requires_approval = serializers.BooleanField()
    timeout_s = serializers.FloatField()
    rate_limit_per_minute = serializers.IntegerField(
        allow_null=True, help_text="Calls a minute per tenant, across processes; null: no limit."
    )


class ToolDefinitionInfoSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField(help_text=f"One of: {', '.join(ToolKind.values)}.")
    config = serializers.JSONField()
    depends_on = serializers.JSONField(
        help_text="Inputs taken from other tools' results: {input: {from, path}}."
    )
    examples = serializers.JSONField(help_text="Its examples with expectations (self-tests).")
    effect = serializers.CharField(help_text='"": derived from the method or the built-in.')
    idempotent = serializers.BooleanField(allow_null=True)
    has_secret = serializers.BooleanField()
    enabled = serializers.BooleanField()
    version = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class SelfTestResultSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=["passed", "failed", "skipped"])
    detail = serializers.CharField(allow_blank=True)
    latency_ms = serializers.FloatField()
    run_id = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="The example's call, recorded as a run (null: not called).",
    )


class ToolHealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=["passing", "failing", "skipped"],
        help_text="skipped: every example writes and none is marked safe_to_run.",
    )
    checked_at = serializers.DateTimeField()
    results = SelfTestResultSerializer(many=True)


class ToolProviderSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["mcp"])
    id = serializers.IntegerField()
    name = serializers.CharField()
    domains = serializers.ListField(child=serializers.ChoiceField(choices=Domain.choices))


# Where a tool comes from (tools.tool_sources.ToolOrigin): the platform's own built-ins, an
# installed package's plug-in, a tenant definition (http, or builtin: a built-in's variant),
# an MCP server connection.
TOOL_KINDS = ["builtin", "plugin", "http", "mcp"]


class ToolPluginSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The plug-in's entry point.")
    package = serializers.CharField(help_text="The installed distribution that declares it.")


class ToolSerializer(serializers.Serializer):
    """A tool as the tenant's agents see it, with the tenant definition behind it, if any."""

    name = serializers.CharField()
    kind = serializers.ChoiceField(
        choices=TOOL_KINDS,
        help_text="Where it comes from, as recorded where it was registered: `builtin` (the "
        "platform's own, or a definition's variant of one), `plugin` (an installed package's: "
        "see `plugin`), `http` (a tenant definition), `mcp` (one of the tenant's MCP server "
        "connections).",
    )
    description = serializers.CharField()
    input_schema = serializers.JSONField()
    output_schema = serializers.JSONField(allow_null=True)
    tags = serializers.ListField(child=serializers.CharField())
    examples = serializers.ListField(child=serializers.JSONField())
    selftests = serializers.ListField(
        child=serializers.JSONField(),
        help_text="Examples with what their result should be: {arguments, expect, safe_to_run}.",
    )
    health = ToolHealthSerializer(
        allow_null=True, help_text="The latest self-test; null if it never ran."
    )
    capability = CapabilitySerializer()
    enabled = serializers.BooleanField(
        help_text="False: a disabled definition; agents do not see this tool."
    )
    definition = ToolDefinitionInfoSerializer(
        allow_null=True, help_text="The tenant's definition; null for an untouched built-in."
    )
    plugin = ToolPluginSerializer(
        allow_null=True, help_text="The plug-in it comes from, for kind `plugin`; else null."
    )
    provider = ToolProviderSerializer(
        allow_null=True,
        help_text="The context provider the tool comes from (an MCP connection); else null.",
    )


class ToolExecuteSerializer(StrictSerializer):
    arguments = JSONObjectField(help_text="The tool's arguments, per its input_schema.")


class PreparedRequestSerializer(serializers.Serializer):
    method = serializers.CharField()
    url = serializers.CharField(help_text="With its query string, encoded as it is sent.")
    headers = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2),
        help_text=(
            "[name, value] pairs in the order sent. The header carrying the tool's credential "
            "shows *** (the credential is added only when the request is sent)."
        ),
    )
    body = serializers.CharField(
        allow_null=True, help_text="The exact body text (sent UTF-8 encoded); null: none."
    )
    credential_header = serializers.CharField(
        allow_null=True, help_text="The header the tool's credential goes in; null: none."
    )


class ToolResultSerializer(serializers.Serializer):
    call_id = serializers.CharField()
    name = serializers.CharField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_null=True, help_text="Set when the tool failed.")
    latency_ms = serializers.FloatField()
    run_id = serializers.IntegerField(help_text="The run that records this call.")
    status = serializers.ChoiceField(choices=["succeeded", "failed", "awaiting_approval"])
    decide_at = serializers.CharField(
        allow_blank=True, help_text="For a call awaiting approval: where it is decided."
    )
    prepared_request = PreparedRequestSerializer(
        allow_null=True,
        help_text="For a call awaiting approval of a tool that sends one HTTP request: the "
        "exact request approving sends (credential masked).",
    )


# -- provider connections ----------------------------------------------------------------
class ProviderConnectionSerializer(CleanModelSerializer):
    api_key = SecretField(help_text="The provider's API key. Write-only.")
    has_api_key = serializers.SerializerMethodField()
    extra_headers = JSONObjectField(
        required=False, help_text="Sent with every request; not for credentials."
    )
    allowed_models = _text_list(200)

    class Meta:
        model = ProviderConnection
        fields = [
            "id",
            "name",
            "kind",
            "preset",
            "base_url",
            "api_key",
            "has_api_key",
            "extra_headers",
            "default_model",
            "allowed_models",
            "timeout_s",
            "max_retries",
            "is_default",
            "health_status",
            "health_message",
            "last_checked_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "id",
            "health_status",
            "health_message",
            "last_checked_at",
            "created_at",
            "updated_at",
        ]

    def get_has_api_key(self, connection: ProviderConnection) -> bool:
        return bool(connection.api_key)

    def save_with_service(
        self, tenant: Tenant, connection: ProviderConnection | None, changes: dict[str, Any]
    ) -> ProviderConnection:
        return connection_save(tenant=tenant, connection=connection, changes=changes)


# -- model aliases (gateway fallback and load sharing) -------------------------------------
class ModelAliasSerializer(CleanModelSerializer):
    targets = serializers.JSONField(
        help_text='In order: [{"connection": "<connection name>", "model": "<model>"}, ...] '
        "(an empty model: the connection's default). Called on /v1 as `alias/<name>`."
    )

    class Meta:
        model = ModelAlias
        fields = ["id", "name", "targets", "load_balancing", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]

    def save_with_service(
        self, tenant: Tenant, alias: ModelAlias | None, changes: dict[str, Any]
    ) -> ModelAlias:
        return model_alias_save(tenant=tenant, alias=alias, changes=changes)


# -- context providers: MCP server connections ---------------------------------------------
class ProviderHealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=Health.choices)
    reason = serializers.CharField(
        allow_blank=True, help_text='Why it is failing, in the platform\'s words; "" otherwise.'
    )
    checked_at = serializers.DateTimeField(allow_null=True)


class McpConnectionSerializer(CleanModelSerializer):
    auth_header = SecretField(
        help_text="Sent as the Authorization header (a bare token as `Bearer <token>`). "
        'Write-only: send it to set it, null or "" to clear it, omit it to keep it.'
    )
    has_auth_header = serializers.SerializerMethodField()
    allowed_tool_names = _text_list(200, help_text="Remote tool names to import; [] imports all.")
    domains = serializers.ListField(
        child=serializers.ChoiceField(choices=Domain.choices),
        required=False,
        max_length=len(Domain.choices),
        help_text="The capability domains this provider covers.",
    )
    health = serializers.SerializerMethodField()
    tools = serializers.SerializerMethodField()

    class Meta:
        model = McpServerConnection
        fields = [
            "id", "name", "url", "auth_header", "has_auth_header", "auth_mode", "oauth_scope",
            "oauth_client_id", "enabled", "tool_prefix",
            "allowed_tool_names", "context_resource_uri", "tool_examples", "timeout_s", "domains",
            "status", "last_error", "last_refreshed_at", "health", "tools", "created_at",
            "updated_at",
        ]  # fmt: skip
        read_only_fields = [
            "id", "status", "last_error", "last_refreshed_at", "created_at", "updated_at",
        ]  # fmt: skip
        extra_kwargs = {"tool_prefix": {"required": False}}

    def get_has_auth_header(self, connection: McpServerConnection) -> bool:
        return bool(connection.auth_header)

    @extend_schema_field(ProviderHealthSerializer)
    def get_health(self, connection: McpServerConnection) -> dict[str, Any]:
        return ProviderHealthSerializer(connection.health.as_json()).data

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_tools(self, connection: McpServerConnection) -> list[str]:
        """The remote tools of the last successful listing."""
        return [str(t.get("name")) for t in connection.tools_cache or [] if isinstance(t, dict)]

    def validate_tool_prefix(self, value: str) -> str:
        return value or ""

    def save_with_service(
        self, tenant: Tenant, connection: McpServerConnection | None, changes: dict[str, Any]
    ) -> McpServerConnection:
        return mcp_connection_save(tenant=tenant, connection=connection, changes=changes)


class ContextProviderSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["mcp", "knowledge_base", "tool_source"])
    id = serializers.IntegerField(
        allow_null=True,
        help_text="The MCP connection's or knowledge base's id; null for a tool source "
        "registered by an installed app (`name` is its label).",
    )
    name = serializers.CharField()
    domains = serializers.ListField(child=serializers.ChoiceField(choices=Domain.choices))
    health = ProviderHealthSerializer()
    tools = serializers.ListField(
        child=serializers.CharField(), help_text="The agent's tools it contributes."
    )


class McpAccountSerializer(serializers.Serializer):
    connected = serializers.BooleanField()
    connected_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="When the access token expires (it is renewed before)."
    )


class McpConnectionCheckSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    message = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    connection = McpConnectionSerializer()


class ConnectionTestSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    message = serializers.CharField()
    health_status = serializers.CharField()
    last_checked_at = serializers.DateTimeField(allow_null=True)


# -- conversations and facts -------------------------------------------------------------
class ConversationSerializer(CleanModelSerializer):
    agent = TenantSlugField(
        slug_field="slug", queryset=Agent.objects.all(), required=False, allow_null=True
    )
    crew = TenantSlugField(
        slug_field="slug", queryset=Crew.objects.all(), required=False, allow_null=True
    )

    leaf = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="The last message of the branch shown: the next turn follows it (null "
        "before the first message).",
    )

    class Meta:
        model = Conversation
        fields = ["id", "agent", "crew", "title", "leaf", "created_at", "updated_at"]
        read_only_fields = ["id", "leaf", "created_at", "updated_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("agent")) == bool(attrs.get("crew")):
            raise serializers.ValidationError({"agent": ["Give exactly one agent or crew."]})
        return attrs

    def save_with_service(
        self, tenant: Tenant, conversation: Conversation | None, changes: dict[str, Any]
    ) -> Conversation:
        owner_user = changes.pop("owner_user", None)  # given on create, by the view
        owner_api_key = changes.pop("owner_api_key", None)
        return conversation_save(
            tenant=tenant,
            conversation=conversation,
            changes=changes,
            owner_user=owner_user,
            owner_api_key=owner_api_key,
        )


class MessageSerializer(serializers.ModelSerializer):
    role = serializers.CharField(read_only=True, help_text="user or assistant.")
    tool_calls = serializers.JSONField(read_only=True)
    parent = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="The message it follows (null for a first message). Edited messages and "
        "answers given again are versions: messages with the same parent.",
    )

    class Meta:
        model = Message
        fields = ["id", "parent", "role", "content", "tool_calls", "run", "created_at"]
        read_only_fields = fields


def _no_nul(value: str) -> None:
    if "\x00" in value:
        raise serializers.ValidationError("Text may not contain NUL characters.")


MESSAGE_ID = {"min_value": 1, "max_value": 2**63 - 1}


class MessageEditSerializer(StrictSerializer):
    message = serializers.IntegerField(
        **MESSAGE_ID, help_text="Id of one of your messages in this conversation."
    )
    input = serializers.CharField(
        max_length=MAX_INPUT_CHARS,
        trim_whitespace=False,
        validators=[_no_nul],
        help_text="The message's new text.",
    )


class ForkSerializer(StrictSerializer):
    message = serializers.IntegerField(
        **MESSAGE_ID, help_text="Id of the message the fork ends with (any role)."
    )
    title = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        validators=[_no_nul],
        help_text="The new conversation's title; the original's, marked as a fork, if empty.",
    )


class BranchSwitchSerializer(StrictSerializer):
    message = serializers.IntegerField(
        **MESSAGE_ID,
        help_text="Any message of the branch to show: the newest message under it becomes "
        "the conversation's leaf.",
    )


class BranchSerializer(serializers.Serializer):
    tip = serializers.IntegerField(source="pk", help_text="Its last message.")
    role = serializers.CharField(help_text="The last message's role.")
    preview = serializers.SerializerMethodField(help_text="The last message's first words.")
    current = serializers.BooleanField(help_text="Is it the branch shown and continued?")
    created_at = serializers.DateTimeField()

    def get_preview(self, message: Message) -> str:
        return message.content[:200]


class MessageHitSerializer(serializers.Serializer):
    message = serializers.IntegerField(source="message_id")
    conversation = serializers.IntegerField(source="conversation_id")
    conversation_title = serializers.CharField()
    role = serializers.CharField()
    created_at = serializers.DateTimeField()
    rank = serializers.FloatField(help_text="Relevance (higher first).")
    snippet = serializers.CharField(
        help_text="HTML: the matching passage, escaped, with the words found in <mark>."
    )


class ConversationSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = ConversationSummary
        fields = [
            "id", "last_message", "previous", "text", "messages_covered", "tokens_covered",
            "model", "run", "call", "created_at",
        ]  # fmt: skip
        read_only_fields = fields
        extra_kwargs = {
            "last_message": {"help_text": "The last message it covers (its key)."},
            "previous": {"help_text": "The earlier summary it covers too."},
            "messages_covered": {"help_text": "Messages it stands for, with the previous's."},
            "tokens_covered": {"help_text": "Their tokens, estimated."},
            "model": {"help_text": "<connection>/<model> that wrote it."},
            "run": {"help_text": "The run it was made for."},
            "call": {"help_text": "The summarising model call, recorded as a run."},
        }


class FactSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True,
        help_text="The agent whose run wrote it (and, for agent scope, whose memory it is).",
    )  # fmt: skip
    edited_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text="The person who last edited its text.",
    )  # fmt: skip

    class Meta:
        model = Fact
        fields = [
            "id", "scope", "user", "agent", "api_key", "text", "source_run", "created_at",
            "expires_at", "edited_by", "edited_at",
        ]  # fmt: skip
        read_only_fields = fields
        extra_kwargs = {
            "scope": {"help_text": "Whose it is: person (user), agent, tenant, or key (api_key)."},
            "user": {"help_text": "With person scope: the person it is about."},
            "api_key": {"help_text": "With key scope: the API key whose runs keep it."},
            "source_run": {"help_text": "The run that remembered it."},
            "expires_at": {"help_text": "When it is forgotten (its agent's retention)."},
        }


class FactTextField(serializers.CharField):
    """Text only: a number or a list is refused, not turned into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class FactEditSerializer(StrictSerializer):
    text = FactTextField(max_length=1000, help_text="The fact's new text.")


# -- API keys and members ----------------------------------------------------------------
class ApiKeyMakerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()


class ApiKeySerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )  # the person whose role caps it; none: the operator's key
    created_by_key = ApiKeyMakerSerializer(
        read_only=True, allow_null=True, help_text="The key that made it, if a key did."
    )
    made_by = serializers.CharField(
        read_only=True,
        help_text="A username, `key <name>` (with the person behind it in brackets) or `operator`.",
    )
    effective_role = serializers.ChoiceField(
        choices=Role.choices,
        read_only=True,
        allow_null=True,
        help_text="What it may do now: `role` lowered to its creator's current role. Null: "
        "its creator is no longer a member (or their account is inactive); it is unusable.",
    )
    usable = serializers.BooleanField(source="is_usable", read_only=True)

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "role",
            "allowed_agents",
            "allowed_tools",
            "acts_for_members",
            "created_by",
            "created_by_key",
            "made_by",
            "effective_role",
            "created_at",
            "last_used_at",
            "expires_at",
            "revoked_at",
            "usable",
        ]
        read_only_fields = fields


class ApiKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices), min_length=1, max_length=5
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    allowed_agents = _text_list(50, help_text="Only these agents' and crews' slugs (empty: all).")
    allowed_tools = _text_list(128, help_text="Only these tools (empty: all).")
    acts_for_members = serializers.BooleanField(
        required=False,
        default=False,
        help_text="May name a member (OpenAI's `user`) whose runs it starts. An owner's or "
        "admin's key only.",
    )


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="The full key. Shown in this response only.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class MemberUserSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    email = serializers.CharField()


class MemberSerializer(serializers.ModelSerializer):
    user = MemberUserSerializer(read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "role", "created_at"]
        read_only_fields = fields


class MemberAddSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150, required=False)
    email = serializers.EmailField(max_length=254, required=False)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("username" in attrs) == ("email" in attrs):
            raise serializers.ValidationError(
                {"username": ["Give exactly one of username or email."]}
            )
        return attrs


class InvitationSerializer(serializers.ModelSerializer):
    invited_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    status = serializers.ChoiceField(choices=InvitationStatus.choices, read_only=True)

    class Meta:
        model = Invitation
        fields = ["id", "invitee", "role", "status", "invited_by", "created_at", "expires_at"]
        read_only_fields = fields


class InvitationCreatedSerializer(InvitationSerializer):
    accept_url = serializers.CharField(
        help_text="The invitee opens it signed in to accept. Shown in this response only."
    )

    class Meta(InvitationSerializer.Meta):
        fields = [*InvitationSerializer.Meta.fields, "accept_url"]
        read_only_fields = fields


class MemberRoleSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)
