"""Agents, conversations, facts, and durable runs with their events and approvals."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from agents.runtime.compaction_rules import threshold_problem
from agents.runtime.quota_rules import DUPLICATE_QUOTA_MESSAGE, TARGETS, quota_problems
from agents.runtime.spec import TERMINAL, Decision, RunStatus
from base.config_checks import ConfigObject
from base.encryption import EncryptedTextField
from base.secret_destinations import SecretDestination
from providers.models import LoadBalancing, fallbacks_problem
from tenancy.models import ApiKey, Tenant
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.tool import NAME_PATTERN

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{0,49}$", "Lowercase letters, digits, _ and -."
)


MAX_INPUT_CHARS = 100_000  # a run's input (and a crew's task made from a conversation)


class ApprovalPolicy(models.TextChoices):
    FLAGGED = "flagged", "Tools that require approval"
    WRITES = "writes", "Also every write or destructive tool"
    NEVER = "never", "Never ask (trusted automation)"


class MemoryScope(models.TextChoices):
    """Whose memory an agent's runs keep (agents/memory/scopes.py)."""

    PERSON = "person", "Each person's own"
    AGENT = "agent", "Shared by everyone using this agent"
    TENANT = "tenant", "Shared by the whole workspace"


class FactScope(models.TextChoices):
    """Whose a remembered fact is: a person's, an agent's, the tenant's, or an API key's
    (a key's runs that act for no member, when their agent allows it)."""

    PERSON = "person", "A person's"
    AGENT = "agent", "An agent's"
    TENANT = "tenant", "The workspace's"
    KEY = "key", "An API key's"


class ApprovalDeciders(models.TextChoices):
    STARTER = "starter", "The run's starter, and admins"
    ADMINS = "admins", "Admins only"
    GROUP = "group", "Members of a group, and admins"


class Agent(ConfigObject, SecretDestination, models.Model):
    secret_field, secret_label = "remote_token", "token"
    destination_fields = ("remote_url",)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    slug = models.CharField(max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    instructions = models.TextField(blank=True)
    provider_connection = models.ForeignKey(
        "providers.ProviderConnection",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Empty: the tenant's default connection.",
    )
    model = models.CharField(
        max_length=200, blank=True, help_text="Empty: the connection's default."
    )
    # Provider fallback and load sharing (providers/runtime/fallback.py, docs/fallback.md):
    # [{"connection": "<name>", "model": "<model or empty: its default>"}, ...] in order.
    fallbacks = models.JSONField(
        default=list,
        blank=True,
        help_text="Tried in order when the connection fails with a retryable error.",
    )
    load_balancing = models.CharField(
        max_length=20,
        choices=LoadBalancing.choices,
        default=LoadBalancing.OFF,
        blank=True,
        help_text="How the fallbacks that serve the agent's own model share its load.",
    )
    temperature = models.FloatField(null=True, blank=True)
    # Long conversations (agents/conversations/compaction.py): above this many tokens of
    # history, a run's older turns are summarised by this connection's model.
    compaction_threshold = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Tokens of conversation history above which older turns are summarised. "
        "Empty: the platform's default (HISTORY_TOKEN_BUDGET).",
    )
    compaction_connection = models.ForeignKey(
        "providers.ProviderConnection",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Which connection summarises. Empty: the agent's own.",
    )
    compaction_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="Which model summarises. Empty: the agent's own model (or, with another "
        "connection, that connection's default).",
    )
    max_rounds = models.PositiveSmallIntegerField(default=10)
    max_tool_calls = models.PositiveSmallIntegerField(default=50)
    max_tokens_per_run = models.PositiveIntegerField(null=True, blank=True)
    use_all_tools = models.BooleanField(
        default=True, help_text="Off: only the names and tags below."
    )
    tool_names = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    tool_tags = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    tool_exclude = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    approval_policy = models.CharField(
        max_length=10, choices=ApprovalPolicy.choices, default=ApprovalPolicy.FLAGGED
    )
    approval_deciders = models.CharField(
        max_length=10, choices=ApprovalDeciders.choices, default=ApprovalDeciders.STARTER,
        help_text="Who may approve or reject this agent's tool calls.",
    )  # fmt: skip
    approval_group = models.ForeignKey(
        "tenancy.TenantGroup", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+", help_text="With 'members of a group': the group.",
    )  # fmt: skip
    approval_not_starter = models.BooleanField(
        default=False,
        help_text="Never the person (or key) who started the run.",
    )
    memory = models.BooleanField(default=False)
    memory_scope = models.CharField(
        max_length=10, choices=MemoryScope.choices, default=MemoryScope.PERSON,
        help_text="Whose memory its runs keep: each person's own, one shared by everyone "
        "using this agent, or one shared by the whole workspace (its runs also recall the "
        "person's own).",
    )  # fmt: skip
    memory_retention_days = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(36500)],
        help_text="Facts it remembers are forgotten after this many days. Empty: kept.",
    )  # fmt: skip
    memory_key_runs = models.BooleanField(
        default=False,
        help_text="Runs started with an API key (acting for no member) get memory too: the "
        "key's own, never a person's.",
    )
    results_without_tools = models.BooleanField(
        default=False,
        help_text="Answer from tool results with a model call offered no tools: text in a "
        "result (a prompt injection) cannot make the agent call another tool. One round of "
        "tools per run, then the answer.",
    )
    code_mode = models.BooleanField(
        default=False,
        help_text="Offer run_code: the model writes a Python program that calls the agent's "
        "tools as functions, run in a sandbox (docs/code-mode.md).",
    )
    verifier_tool = models.CharField(
        max_length=64,
        blank=True,
        help_text="A tool that checks each succeeded run's outcome: it is given the claim, the "
        'input and the evidence, and answers {"verified": true|false, "note": "..."}.',
    )
    output_schema = models.JSONField(null=True, blank=True)
    kind = models.CharField(
        max_length=40, default="orchestrator", help_text="How the agent thinks; see agent kinds."
    )
    remote_url = models.URLField(blank=True, help_text="For the remote kind: its agent server.")
    remote_command = models.CharField(
        max_length=64,
        blank=True,
        help_text="For the remote kind, instead of a URL: a command the operator allow-lists "
        "(REMOTE_AGENT_COMMANDS), spoken to in JSON lines.",
    )
    remote_token = EncryptedTextField(null=True, blank=True)
    # The remote agent's health, checked periodically (agents.remote_health): None: never.
    remote_healthy = models.BooleanField(null=True, blank=True, editable=False)
    remote_health_detail = models.CharField(max_length=300, blank=True, editable=False)
    remote_health_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    active = models.BooleanField(default=True)
    # Publishing only what passes (agents/publishing.py): with a dataset here, a change is
    # saved as a draft, evaluated, and goes live only if its score reaches the threshold.
    required_evaluation = models.ForeignKey(
        "Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="A dataset every change must pass before it goes live. Empty: changes "
        "go live at once.",
    )  # fmt: skip
    pass_threshold = models.FloatField(
        default=1.0, help_text="The share of the dataset's cases a change must pass (0 to 1)."
    )
    version = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="agent_slug_unique")]
        ordering = ["name"]
        # Held by anyone on one agent, it limits chatting with it to its holders (and admins).
        permissions = [("use_agent", "Can chat with this agent")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        self.version += 1
        super().save(*args, **kwargs)

    def destination_url(self) -> str:
        return self.remote_url or ""

    def clean(self) -> None:
        """The agent's own fields and tenant; its schema, kind, remote URL (credentials),
        approval group, allowed model and tool names are the configuration compiler's,
        checked over the tenant's whole configuration (`ConfigObject`)."""
        if moved := self.secret_destination_errors():
            raise ValidationError(moved)
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ValidationError({"temperature": "Between 0 and 2."})
        if not 1 <= self.max_rounds <= 100:
            raise ValidationError({"max_rounds": "Between 1 and 100."})
        if problem := fallbacks_problem(self.fallbacks):
            raise ValidationError({"fallbacks": problem})
        if self.verifier_tool and not NAME_PATTERN.match(self.verifier_tool):
            raise ValidationError({"verifier_tool": "A tool name: letters, digits, _ and -."})
        group = self.approval_group
        if group is not None and group.tenant_id != self.tenant_id:
            raise ValidationError({"approval_group": "Choose one of this tenant's groups."})
        if problem := threshold_problem(self.compaction_threshold):
            raise ValidationError({"compaction_threshold": problem})
        if not 0 <= self.pass_threshold <= 1:
            raise ValidationError({"pass_threshold": "Between 0 and 1."})
        dataset = self.required_evaluation
        if dataset is not None and dataset.tenant_id != self.tenant_id:
            raise ValidationError({"required_evaluation": "Choose one of this tenant's datasets."})
        for name in ("provider_connection", "compaction_connection"):
            connection = getattr(self, name)
            if connection is not None and connection.tenant_id != self.tenant_id:
                raise ValidationError({name: "Choose one of this tenant's connections."})


class CrewMode(models.TextChoices):
    SEQUENTIAL = "sequential", "Sequential: each builds on the previous"
    PARALLEL = "parallel", "Parallel: all at once, then combined"
    HIERARCHICAL = "hierarchical", "Hierarchical: a manager delegates"


class Crew(ConfigObject, models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="crews")
    slug = models.CharField(max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    mode = models.CharField(max_length=20, choices=CrewMode.choices, default=CrewMode.SEQUENTIAL)
    manager = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="managed_crews"
    )
    max_delegations = models.PositiveSmallIntegerField(default=10)
    max_depth = models.PositiveSmallIntegerField(default=3)
    token_budget = models.PositiveIntegerField(null=True, blank=True)
    # Long conversations, as an agent's (agents/conversations/compaction.py): a hierarchical
    # crew's take precedence over its manager's where set.
    compaction_threshold = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Tokens of conversation history above which older turns are summarised. "
        "Empty: the platform's default (HISTORY_TOKEN_BUDGET).",
    )
    compaction_connection = models.ForeignKey(
        "providers.ProviderConnection",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Which connection summarises. Empty: the tenant's default.",
    )
    compaction_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="Which model summarises. Empty: the connection's default.",
    )
    active = models.BooleanField(default=True)
    # Publishing only what passes, as an agent's (agents/publishing.py): a change to the crew
    # (its members, mode, manager, limits, compaction) is a draft until its evaluation passes.
    required_evaluation = models.ForeignKey(
        "Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="A dataset every change must pass before it goes live. Empty: changes "
        "go live at once.",
    )  # fmt: skip
    pass_threshold = models.FloatField(
        default=1.0, help_text="The share of the dataset's cases a change must pass (0 to 1)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="crew_slug_unique")]
        ordering = ["name"]
        # Held by anyone on one crew, it limits chatting with it to its holders (and admins).
        permissions = [("use_crew", "Can chat with this crew")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.mode == CrewMode.HIERARCHICAL and self.manager_id is None:
            raise ValidationError({"manager": "A hierarchical crew needs a manager agent."})
        if self.manager_id and self.manager.tenant_id != self.tenant_id:
            raise ValidationError({"manager": "Choose one of this tenant's agents."})
        if problem := threshold_problem(self.compaction_threshold):
            raise ValidationError({"compaction_threshold": problem})
        connection = self.compaction_connection
        if connection is not None and connection.tenant_id != self.tenant_id:
            raise ValidationError(
                {"compaction_connection": "Choose one of this tenant's connections."}
            )
        if not 0 <= self.pass_threshold <= 1:
            raise ValidationError({"pass_threshold": "Between 0 and 1."})
        dataset = self.required_evaluation
        if dataset is not None and dataset.tenant_id != self.tenant_id:
            raise ValidationError({"required_evaluation": "Choose one of this tenant's datasets."})


class CrewMember(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    crew = models.ForeignKey(Crew, on_delete=models.CASCADE, related_name="members")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["crew", "agent"], name="crew_member_unique")]
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.agent} in {self.crew}"


def crew_members_replacer(tenant: Tenant, members: list[Agent]) -> Callable[[Crew], None]:
    """What `save_validated` calls after saving a crew: its members replaced, in order."""

    def replace_members(saved: Crew) -> None:
        CrewMember.objects.filter(crew=saved).delete()
        CrewMember.objects.bulk_create(
            CrewMember(tenant=tenant, crew=saved, agent=agent, position=position)
            for position, agent in enumerate(members)
        )

    return replace_members


class Conversation(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL)
    crew = models.ForeignKey(Crew, null=True, blank=True, on_delete=models.SET_NULL)
    owner_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE
    )
    owner_api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL)
    title = models.CharField(max_length=200, blank=True)
    # The tip of the branch shown: the next turn follows it (agents/conversations/branches.py).
    leaf = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"


class Run(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="runs")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL)
    crew = models.ForeignKey(Crew, null=True, blank=True, on_delete=models.SET_NULL)
    workflow = models.ForeignKey(
        "WorkflowDefinition", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    child_key = models.CharField(max_length=200, blank=True)  # which step of the parent
    # A direct tool call (MCP, REST) recorded as a run: no agent, one call of this tool.
    tool_name = models.CharField(max_length=128, blank=True)
    # A call straight to a connection's model (/v1/embeddings): `<connection>/<model>`.
    gateway_model = models.CharField(max_length=300, blank=True)
    depth = models.PositiveSmallIntegerField(default=0)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    # The user message it answered: the tip of the branch it continued (its history is that
    # message's ancestors; agents/conversations/history.py). Null outside conversations.
    in_reply_to = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    initiated_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    initiated_by_api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL
    )
    status = models.CharField(
        max_length=20,
        choices=[(s.value, s.value.replace("_", " ")) for s in RunStatus],
        default=RunStatus.QUEUED,
        db_index=True,
    )
    input = models.TextField(blank=True)
    # What an API caller sent beside the input (agents.runtime.client_request): its
    # conversation, instructions, tools, output format and sampling; null for others.
    client_request = models.JSONField(null=True, blank=True)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    instructions_digest = models.CharField(max_length=64, blank=True)
    tools_digest = models.CharField(max_length=64, blank=True)
    correlation_id = models.CharField(max_length=64, db_index=True)
    # The W3C traceparent of the span its starter was in (a caller's, a crew run's), so
    # the process executing it continues that trace (agents.observability); "" for none.
    traceparent = models.CharField(max_length=55, blank=True, default="")
    # NULL (not "") when absent: the unique constraint ignores NULLs only.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    limits = models.JSONField(default=dict, blank=True)
    # The configuration versions it ran with (tenancy/records/history.py): its agent
    # or crew, the agent's connection and tool definitions, as {"agents.agent": [[id, n]]}.
    config_versions = models.JSONField(default=dict, blank=True)
    # A workflow run's document as it started, {"digest", "definition"}: it runs (and is
    # resumed with) the steps it began with, whatever edits the workflow since.
    workflow_snapshot = models.JSONField(null=True, blank=True)
    # An evaluation's run of a draft (agents/publishing.py): the agent or crew as drafted,
    # never a chat's run.
    agent_draft = models.ForeignKey(
        "AgentDraft", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    # US dollars its own model calls cost (providers.pricing; 0 when the model has no
    # price), and with its child runs' (a crew's members): summing cost_usd never counts
    # a call twice.
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    total_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    output = models.TextField(blank=True)
    structured_output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    state = models.JSONField(null=True, blank=True, help_text="The resumable checkpoint.")
    # A succeeded run's outcome claim: what it says it did or answered, and its evidence
    # (the tool results it used) — agents.verification. Verifying it is a separate record.
    claim = models.JSONField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # When its execution was last asked for; a queued run whose message went missing (a
    # worker took it and died before claiming) is asked for again by the sweeper.
    queued_at = models.DateTimeField(null=True, blank=True, db_index=True)
    lease_owner = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(default=0)
    # Started by a schedule or webhook (agents/triggers.py): its run history.
    trigger = models.ForeignKey(
        "Trigger", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["parent", "child_key"],
                condition=Q(parent__isnull=False),
                name="run_child_key_unique",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_key_unique",
            ),
        ]
        indexes = [models.Index(fields=["status", "lease_expires_at"])]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


# A tool call's event that carries an error (failed, refused, rate limited): counted by
# GET /metrics on a partial index, so a scrape reads those rows only.
TOOL_ERROR_EVENT = Q(type="tool.completed", payload__error__isnull=False) & ~Q(payload__error=None)


class RunEvent(models.Model):
    """Append-only, numbered per run, so a stream can resume after any event."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique")]
        indexes = [
            models.Index(fields=["tenant"], condition=TOOL_ERROR_EVENT, name="run_event_tool_error")
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.seq} {self.type}"


class Message(models.Model):
    """One turn's text. A conversation's messages form a tree by `parent` (the message this
    one follows; None for a first message): an edited message is a new sibling of the old
    one, an answer given again a new sibling of the old answer, and every branch stays
    (agents/conversations/branches.py). A child always has a greater id than its parent, so
    a branch read by id is in order."""

    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)  # what the run called, for display
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL)
    # An answer's: what the person said to its run while it worked (agents.runs.steering),
    # in order, so later turns' history has it at its place (agents/conversations/history.py).
    steers = ArrayField(models.TextField(), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Its words for search (agents/conversations/search.py), filled by Postgres on every write.
    search = models.GeneratedField(
        expression=SearchVector("content", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["id"]
        indexes = [GinIndex(fields=["search"], name="agents_message_search")]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class AttachmentKind(models.TextChoices):
    IMAGE = "image", "Image"
    DOCUMENT = "document", "Document"


class AttachmentStatus(models.TextChoices):
    READING = "reading", "Reading"  # a worker reads and embeds it (a large document)
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"  # `error` says why, in words for the person


class Attachment(models.Model):
    """A file a person attached in a conversation (agents/conversations/attachments.py):
    pending until a message is sent with it, then that message's. Its bytes are in the
    attachments storage under `storage_key` (made by the platform: the name as given is
    shown, never used as a path); its type is what its content is, never what its name or
    the browser said. A document's text is in its chunks; a large one's are made by a
    worker (agents/conversations/attachment_reading.py) while it is `reading`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="attachments")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="attachments"
    )
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments"
    )
    # The runs given it (its message's run, and later runs of the conversation given it as
    # a document): the run record's list of what it received.
    runs = models.ManyToManyField(Run, blank=True, related_name="attachments")
    uploaded_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    uploaded_by_api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL
    )
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=10, choices=AttachmentKind.choices)
    media_type = models.CharField(max_length=100)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    storage_key = models.CharField(max_length=300, unique=True)
    text_chars = models.IntegerField(default=0)  # a document's text, in characters
    text = models.TextField(blank=True)  # a small document's whole text (ATTACHMENT_INLINE_CHARS)
    status = models.CharField(
        max_length=10, choices=AttachmentStatus.choices, default=AttachmentStatus.READY
    )
    error = models.CharField(max_length=300, blank=True)  # why it failed, for the person
    read_attempts = models.PositiveSmallIntegerField(default=0)  # workers that claimed it
    # When it was queued or last claimed for reading: a `reading` one older than
    # ATTACHMENT_READ_STALE_S is queued again (its worker died) or, after
    # ATTACHMENT_READ_ATTEMPTS, failed.
    reading_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["tenant", "conversation"], name="agents_attachment_conv"),
            models.Index(
                fields=["reading_since"],
                name="agents_attachment_reading",
                condition=models.Q(status="reading"),
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AttachmentChunk(models.Model):
    """A passage of an attached document, found by `attachment_search` by its words and
    its vector (the embedder an app registers)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    attachment = models.ForeignKey(Attachment, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.IntegerField()
    text = models.TextField()
    locator = models.CharField(max_length=300, blank=True)  # "page 3", "Setup > Install"
    search = models.GeneratedField(
        expression=SearchVector("text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    embedding = VectorField(null=True, blank=True)
    embedder = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["attachment", "ordinal"]
        indexes = [
            models.Index(fields=["tenant", "attachment"], name="agents_attchunk_att"),
            GinIndex(fields=["search"], name="agents_attchunk_search"),
        ]

    def __str__(self) -> str:
        return f"{self.attachment_id}#{self.ordinal}"


class QueuedMessage(models.Model):
    """A person's message for a conversation whose answer is still at work
    (agents.runs.steering): a next turn (`turn`), started when the answer ends, in order; or
    a steering message (`steer`) for the running loop's next round. A steer that arrives
    after the loop's last round becomes a next turn (`late`)."""

    class Kind(models.TextChoices):
        TURN = "turn", "next turn"
        STEER = "steer", "steering"

    class Status(models.TextChoices):
        WAITING = "waiting", "waiting"
        APPLIED = "applied", "applied"  # a steer the loop has taken
        STARTED = "started", "started"  # a turn whose run started (`started_run`)
        REFUSED = "refused", "refused"  # a turn that could not start (`error` says why)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="queued"
    )
    # The run at work when it was sent (the one a steer steers).
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="queued"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WAITING)
    late = models.BooleanField(default=False)  # a steer that came after the last round
    content = models.TextField()
    error = models.CharField(max_length=300, blank=True)
    started_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    initiated_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    initiated_by_api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["conversation", "id"],
                condition=Q(status="waiting"),
                name="queued_message_waiting",
            ),
            models.Index(fields=["run", "kind"], name="queued_message_run"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.status}: {self.content[:60]}"


class ConversationSummary(models.Model):
    """The older turns of a conversation, summarised by a model for a run whose history
    would exceed its agent's compaction threshold (agents/conversations/compaction.py).
    Keyed by the last message it covers: it applies to a history that holds that message,
    and later runs reuse it; a newer summary covers an older one (`previous`) and the turns
    after it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="summaries"
    )
    last_message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="summary")
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    text = models.TextField()
    messages_covered = models.PositiveIntegerField()  # with those of `previous`
    tokens_covered = models.PositiveIntegerField()  # estimated: what it replaced
    model = models.CharField(max_length=300)  # `<connection>/<model>`
    run = models.ForeignKey(  # the run whose history it shortened first
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    call = models.ForeignKey(  # the summarising model call, recorded as a run of its own
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["last_message_id"]

    def __str__(self) -> str:
        return f"Summary of conversation {self.conversation_id} to message {self.last_message_id}"


class Fact(models.Model):
    """What an agent remembered, and whose it is (`scope`): a person's (`user`), an agent's
    (`agent`), the tenant's, or an API key's (`api_key`). Provenance: the run that wrote it
    (`source_run`), its agent (`agent`, for any scope), and the person who last edited it
    (`edited_by`). Recall (agents/memory/) ranks the facts a run may see by `search`
    (words, stemmed) and `embedding` (meaning), fused; facts past `expires_at` are never
    recalled and are purged. Its str never holds its text (audit entries name it)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="facts")
    scope = models.CharField(max_length=10, choices=FactScope.choices, default=FactScope.PERSON)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="facts",
    )  # fmt: skip
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="facts"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="facts"
    )
    text = models.TextField()
    source_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    edited_at = models.DateTimeField(null=True, blank=True)
    # Filled by Postgres on every write (a stored generated column).
    search = models.GeneratedField(
        expression=SearchVector("text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # The text's vector by the model `embedder` names (no fixed dimensions: models differ);
    # empty until embedded, and emptied when the text changes: recall embeds it then.
    embedding = VectorField(null=True, blank=True)
    embedder = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["tenant", "user"], name="agents_fact_tenant_user"),
            models.Index(fields=["tenant", "scope", "agent"], name="agents_fact_tenant_scope"),
            models.Index(
                fields=["expires_at"],
                name="agents_fact_expires",
                condition=Q(expires_at__isnull=False),
            ),
            GinIndex(fields=["search"], name="agents_fact_search"),
        ]
        constraints = [
            models.CheckConstraint(
                name="fact_scope_owner",
                condition=(
                    Q(scope="person", user__isnull=False, api_key__isnull=True)
                    | Q(scope__in=["agent", "tenant"], user__isnull=True, api_key__isnull=True)
                    | Q(scope="key", api_key__isnull=False, user__isnull=True)
                ),
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_scope_display()} fact {self.pk}"

    def save(self, *args, **kwargs) -> None:
        """A fact whose text is saved anew (an edit) loses a vector that was of the old
        text. Costs one query then."""
        fields = kwargs.get("update_fields")
        if not self._state.adding and self.embedder and (fields is None or "text" in fields):
            stored = Fact.objects.filter(pk=self.pk).values_list("text", flat=True).first()
            if stored != self.text:
                self.embedding, self.embedder = None, ""
                if fields is not None:
                    kwargs["update_fields"] = {*fields, "embedding", "embedder"}
        super().save(*args, **kwargs)


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EDITED = "edited", "Edited, asked again"  # its prepared request re-made: see replaced_by


class Approval(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    call_id = models.CharField(max_length=100)
    tool_name = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    status = models.CharField(
        max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    decided_by_label = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    edited_arguments = models.JSONField(null=True, blank=True)
    # The exact request the call sends, for tools that prepare one (HTTP tools): method, url,
    # headers, body; the credential's header masked (tools/runtime/prepared_request.py).
    prepared_request = models.JSONField(null=True, blank=True)
    # Approved with edited arguments, a prepared request is prepared again and asked again:
    # this one is then `edited` and points to the new approval.
    replaced_by = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaces"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "call_id"],
                condition=~Q(status="edited"),
                name="approval_per_call_unique",
            )
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"

    def as_decision(self) -> Decision:
        """A decided approval as the agent loop takes it: an approved prepared request is
        sent as it is, with the arguments it was prepared from."""
        approved = self.status == ApprovalStatus.APPROVED
        if approved and self.prepared_request is not None:
            return Decision(
                approved=True,
                by=self.decided_by_label or "an approver",
                arguments=self.arguments,
                prepared=PreparedRequest.from_dict(self.prepared_request),
            )
        return Decision(
            approved=approved,
            by=self.decided_by_label or "an approver",
            reason=self.reason,
            arguments=self.edited_arguments,
        )


def approval_decisions(run_id: int) -> dict[str, Decision]:
    """The decisions taken on a run's calls, by call id: each call's latest approval, unless
    it is still pending. One query."""
    latest: dict[str, Approval] = {}
    for approval in (
        Approval.objects.filter(run_id=run_id).exclude(status=ApprovalStatus.EDITED).order_by("pk")
    ):
        latest[approval.call_id] = approval
    return {
        call_id: approval.as_decision()
        for call_id, approval in latest.items()
        if approval.status != ApprovalStatus.PENDING
    }


class Verdict(models.TextChoices):
    VERIFIED = "verified", "Verified"
    REFUTED = "refuted", "Refuted"


class VerificationSource(models.TextChoices):
    PERSON = "person", "A person"
    TOOL = "tool", "A verifying tool"
    EVALUATION = "evaluation", "An evaluation"


class Verification(models.Model):
    """A verdict on a run's outcome claim: by a person, a verifying tool or an evaluation.
    A run may collect several; the latest is its current verdict (agents.verification)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="verifications")
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    source = models.CharField(max_length=12, choices=VerificationSource.choices)
    by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    by_label = models.CharField(max_length=200)  # who, as shown: a user, a key, a tool
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["run", "-id"])]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.verdict} by {self.by_label}"


# -- evaluations (agents/evaluations.py, docs/evaluations.md) ------------------------------
class Dataset(models.Model):
    """A tenant's named set of cases (an input and what its answer should be) that an
    evaluation runs against an agent. A case expecting `judge` is scored by a model: the
    dataset's judge connection and model (its rubric is the case's)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100, validators=[slug_validator])
    description = models.TextField(blank=True)
    judge_connection = models.ForeignKey(
        "providers.ProviderConnection",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The connection whose model judges `judge` cases (the tenant's default "
        "connection when empty).",
    )
    judge_model = models.CharField(
        max_length=200, blank=True, help_text="The judge's model (the connection's default)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="dataset_name_unique")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Case(models.Model):
    """One case of a dataset: the input an agent is given, and what its answer should be
    (tools.runtime.expectations, plus `judge`: agents.judging)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="cases")
    name = models.CharField(max_length=100, blank=True)
    input = models.TextField()
    expect = models.JSONField()
    # Added from a chat exchange (thumbs): the run it came from.
    source_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name or self.input[:60]


class EvaluationStatus(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"


class Evaluation(models.Model):
    """A dataset's cases run against an agent (at batch priority), each scored; its
    completion is computed from its runs' states (agents.evaluations.evaluation_advance)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="evaluations")
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Or a crew's cases (a crew's required evaluation, agents/publishing.py): its runs run it.
    crew = models.ForeignKey(
        "Crew", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_slug = models.CharField(max_length=50)  # the agent's (or crew's), kept when deleted
    agent_version = models.PositiveIntegerField(default=0)  # Agent.version when it started
    draft = models.ForeignKey(  # the draft it evaluates (agents/publishing.py), else None
        "AgentDraft", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(
        max_length=12, choices=EvaluationStatus.choices, default=EvaluationStatus.RUNNING
    )
    started_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_by_api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_by_label = models.CharField(max_length=200, blank=True)
    cases = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    judge_input_tokens = models.PositiveIntegerField(default=0)
    judge_output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "updated_at"])]

    def __str__(self) -> str:
        return f"Evaluation {self.pk} of {self.dataset_id} ({self.status})"

    @property
    def score(self) -> float | None:
        """The share of cases passed, once any was scored."""
        scored = self.passed + self.failed + self.errors
        return self.passed / scored if scored else None


class DraftStatus(models.TextChoices):
    EVALUATING = "evaluating", "Being evaluated"
    FAILED = "failed", "Failed its evaluation"
    UNEVALUATED = "unevaluated", "Could not be evaluated"
    PUBLISHED = "published", "Published"
    DISCARDED = "discarded", "Discarded"
    REPLACED = "replaced", "Replaced by a newer change"


PENDING_DRAFT = (DraftStatus.EVALUATING, DraftStatus.FAILED, DraftStatus.UNEVALUATED)


class AgentDraft(models.Model):
    """A change to an agent or a crew whose required evaluation must pass before it goes
    live (agents/publishing.py): the fields it changes, as a configuration version's
    snapshot holds them (`fields`: related objects as ids; `parts`: an agent's skill pins, a
    crew's members), its evaluation and the decision. At most one pending draft per agent
    or crew."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="drafts"
    )
    crew = models.ForeignKey(
        Crew, null=True, blank=True, on_delete=models.CASCADE, related_name="drafts"
    )
    fields = models.JSONField(default=dict)  # {field: value} it changes
    parts = models.JSONField(default=dict, blank=True)  # {"skills"|"members": [...]} it sets
    changes = models.JSONField(default=dict)  # {field: [live, drafted]} when proposed
    based_on = models.PositiveIntegerField(default=0)  # the live version it changes
    status = models.CharField(
        max_length=12, choices=DraftStatus.choices, default=DraftStatus.EVALUATING
    )
    evaluation = models.ForeignKey(
        Evaluation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    threshold = models.FloatField(default=1.0)  # the agent's, when proposed
    score = models.FloatField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)  # why unevaluated, say
    user = models.ForeignKey(  # who proposed it
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)
    decided_by_label = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)  # an override's or discard's
    published_version = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent"],
                condition=Q(status__in=PENDING_DRAFT),
                name="agent_draft_one_pending",
            ),
            models.UniqueConstraint(
                fields=["crew"],
                condition=Q(status__in=PENDING_DRAFT),
                name="crew_draft_one_pending",
            ),
            models.CheckConstraint(
                condition=Q(agent__isnull=True, crew__isnull=False)
                | Q(agent__isnull=False, crew__isnull=True),
                name="draft_of_agent_or_crew",
            ),
        ]

    def __str__(self) -> str:
        if self.crew_id is not None:
            return f"Draft {self.pk} of crew {self.crew_id} ({self.status})"
        return f"Draft {self.pk} of agent {self.agent_id} ({self.status})"

    @property
    def pending(self) -> bool:
        return self.status in PENDING_DRAFT

    @property
    def target(self) -> Agent | Crew:
        return self.crew if self.crew_id is not None else self.agent


class CaseOutcome(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    ERROR = "error", "Error"  # the run did not finish usably, or the judge gave no verdict


class EvaluationResult(models.Model):
    """One case of an evaluation: its run and its score. The case's input and expectation
    are copied, so editing the dataset later does not rewrite the result."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(
        Case, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    position = models.PositiveIntegerField()
    input = models.TextField()
    expect = models.JSONField()
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    outcome = models.CharField(
        max_length=10, choices=CaseOutcome.choices, default=CaseOutcome.PENDING
    )
    score = models.FloatField(null=True, blank=True)  # 1 passed, 0 failed; None otherwise
    reason = models.TextField(blank=True)
    output = models.TextField(blank=True)
    judge_input_tokens = models.PositiveIntegerField(default=0)
    judge_output_tokens = models.PositiveIntegerField(default=0)
    scored_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "position"], name="evaluation_result_position_unique"
            )
        ]

    def __str__(self) -> str:
        return f"Case {self.position} of evaluation {self.evaluation_id}: {self.outcome}"


class Rating(models.TextChoices):
    UP = "up", "Thumbs up"
    DOWN = "down", "Thumbs down"


class Feedback(models.Model):
    """A person's thumbs up or down on a run's answer (in the chat, or REST): one per run
    and person, replaced when they change their mind."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    by_label = models.CharField(max_length=200)
    rating = models.CharField(max_length=4, choices=Rating.choices)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "user"],
                condition=Q(user__isnull=False),
                name="feedback_run_user_unique",
            ),
            models.UniqueConstraint(
                fields=["run", "api_key"],
                condition=Q(api_key__isnull=False),
                name="feedback_run_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rating} on run {self.run_id} by {self.by_label}"


# -- triggers (agents/triggers.py, docs/triggers.md) ---------------------------------------
class WorkflowDefinition(ConfigObject, models.Model):
    """A workflow a tenant declares: typed input, steps (tool, agent, transform, parallel,
    branch) and typed output, kept as its document in `definition` and compiled to the
    runtime's steps (agents/runtime/workflow.py) when saved and when run (docs/workflows.md).
    It runs as a durable run of its own (`Run.workflow`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workflows")
    slug = models.CharField(max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    # The workflow's document: {"input": <JSON Schema>, "output": <JSON Schema>, "steps": [...]}.
    definition = models.JSONField(default=dict, blank=True)
    # Offered to agents (as the tool `workflow_<slug>`) and over MCP when true.
    expose_as_tool = models.BooleanField(default=False)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="workflow_slug_unique")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TriggerKind(models.TextChoices):
    SCHEDULE = "schedule", "Schedule (cron)"
    WEBHOOK = "webhook", "Webhook"


class Trigger(models.Model):
    """Starts runs of an agent or crew on a schedule (cron, in a time zone) or when a signed
    webhook arrives at /hooks/<public_id>; each run is attributed to `run_as`, a member, and
    goes through agents.runs.run_start like every other run."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="triggers")
    public_id = models.CharField(max_length=40, unique=True, editable=False)
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=TriggerKind.choices)
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="triggers"
    )
    crew = models.ForeignKey(
        Crew, null=True, blank=True, on_delete=models.CASCADE, related_name="triggers"
    )
    workflow = models.ForeignKey(
        "WorkflowDefinition", null=True, blank=True, on_delete=models.CASCADE,
        related_name="triggers",
    )  # fmt: skip
    cron = models.CharField(max_length=100, blank=True, help_text="e.g. `0 9 * * 1-5`.")
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA time zone.")
    input_template = models.TextField(
        help_text="The run's input. {{payload.path}} takes a value from a webhook's JSON "
        "body; {{trigger.name}} and {{fired_at}} work for both kinds."
    )
    enabled = models.BooleanField(default=True)
    run_as = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The member the runs are attributed to (their grants and memory).",
    )  # fmt: skip
    # A webhook's signing secret (HMAC needs it back, so encrypted rather than hashed);
    # shown once when made or rotated.
    secret = EncryptedTextField(null=True, blank=True, editable=False)
    # A schedule's next fire time (UTC); claimed and advanced atomically by the beat task.
    next_fire_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_fired_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=500, blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+", editable=False,
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="trigger_name_unique"),
            models.CheckConstraint(  # exactly one of agent, crew, workflow
                condition=Q(agent__isnull=False, crew__isnull=True, workflow__isnull=True)
                | Q(agent__isnull=True, crew__isnull=False, workflow__isnull=True)
                | Q(agent__isnull=True, crew__isnull=True, workflow__isnull=False),
                name="trigger_one_target",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                condition=Q(enabled=True, kind="schedule"),
                name="trigger_due_idx",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def target(self) -> Agent | Crew | WorkflowDefinition | None:
        if self.agent_id:
            return self.agent
        return self.crew if self.crew_id else self.workflow


class QuotaScope(models.TextChoices):
    TENANT = "tenant", "The whole tenant"
    MEMBER = "member", "One member"
    API_KEY = "api_key", "One API key"
    AGENT = "agent", "One agent"


class QuotaMetric(models.TextChoices):
    TOKENS = "tokens", "Tokens (input + output)"
    COST = "cost", "Cost (USD)"


class QuotaPeriod(models.TextChoices):
    DAY = "day", "Per day"
    MONTH = "month", "Per month"


def _only_target(scope: str, target: str | None) -> Q:
    """A quota of `scope` names `target` (user, api_key or agent) and nothing else."""
    return Q(scope=scope, **{f"{name}__isnull": name != target for name in TARGETS})


class Quota(models.Model):
    """A limit that blocks: what a scope (the tenant, a member, a key, an agent) may use of a
    metric in a calendar period (in the tenant's time zone). Enforced by agents.quotas before
    every model call."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    scope = models.CharField(max_length=10, choices=QuotaScope.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas"
    )
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas"
    )
    metric = models.CharField(max_length=10, choices=QuotaMetric.choices)
    period = models.CharField(max_length=10, choices=QuotaPeriod.choices)
    # Tokens: a whole number; cost: US dollars.
    limit = models.DecimalField(max_digits=18, decimal_places=6)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "scope", "user", "api_key", "agent", "metric", "period"],
                nulls_distinct=False,
                name="quota_one_per_target_metric_period",
                violation_error_message=DUPLICATE_QUOTA_MESSAGE,
            ),
            models.CheckConstraint(
                condition=(
                    _only_target("tenant", None)
                    | _only_target("member", "user")
                    | _only_target("api_key", "api_key")
                    | _only_target("agent", "agent")
                ),
                name="quota_scope_names_its_target",
            ),
            models.CheckConstraint(condition=Q(limit__gte=0), name="quota_limit_not_negative"),
        ]

    def __str__(self) -> str:
        return self.label

    def clean(self) -> None:
        """The scope names its one target, of this tenant (a member of it); a token limit
        is a whole number."""
        errors = quota_problems(
            scope=self.scope,
            given={name: getattr(self, f"{name}_id") is not None for name in TARGETS},
            metric=self.metric,
            limit=self.limit,
        )
        if self.api_key_id and self.api_key.tenant_id != self.tenant_id:
            errors["api_key"] = "Choose one of this tenant's API keys."
        if self.agent_id and self.agent.tenant_id != self.tenant_id:
            errors["agent"] = "Choose one of this tenant's agents."
        if self.user_id and not self.tenant.memberships.filter(user_id=self.user_id).exists():
            errors["user"] = "Choose a member of this tenant."
        if errors:
            raise ValidationError(errors)

    @property
    def target_label(self) -> str:
        if self.scope == QuotaScope.MEMBER and self.user is not None:
            return f"member {self.user.get_username()}"
        if self.scope == QuotaScope.API_KEY and self.api_key is not None:
            return f"API key {self.api_key.name!r}"
        if self.scope == QuotaScope.AGENT and self.agent is not None:
            return f"agent {self.agent.slug!r}"
        return "the tenant"

    @property
    def limit_label(self) -> str:
        if self.metric == QuotaMetric.COST:
            return f"${self.limit:.2f}"
        return f"{int(self.limit):,} tokens"

    @property
    def label(self) -> str:
        """'the daily limit of 10,000 tokens for API key 'ci''"""
        period = "daily" if self.period == QuotaPeriod.DAY else "monthly"
        return f"the {period} limit of {self.limit_label} for {self.target_label}"


# Skills' models live in their package (agents/skills/); imported here so Django finds them.
from agents.skills.models import AgentSkill, Skill, SkillFile, SkillStatus, SkillVersion  # noqa: E402, F401
