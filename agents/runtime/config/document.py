"""The configuration document, version 1: a tenant's provider connections, model aliases
and prices, tools, skills (skill_entries.py), agents, crews, workflows, quotas, triggers, MCP server
connections and knowledge bases (their settings) as one YAML or JSON document. Every
object forbids unknown fields, so a typo is an error rather than a silently ignored
setting. Secrets appear only as names.

`document_json_schema()` is the published schema (docs/config-schema/v1.json, kept in step
by a test; `manage.py config schema` prints it).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, field_validator

from agents.runtime.compaction_rules import MAX_THRESHOLD_TOKENS, MIN_THRESHOLD_TOKENS
from agents.runtime.config.skill_entries import SkillEntry
from agents.runtime.declared_workflows.document import workflow_json_schema
from agents.runtime.triggers import TriggerRuleError, zone
from tools.runtime.definitions import BuiltinConfig, Dependency
from tools.runtime.http_tool import HttpToolConfig
from tools.runtime.tool import NAME_PATTERN

VERSION = 1
SCHEMA_ID = "https://agentplatform.dev/config-schema/v1.json"

SLUG_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,49}$"
# A secret named by reference: never its value (docs/configuration-as-code.md, "Secrets").
SECRET_NAME_PATTERN = r"^[a-z]+:[^\x00-\x1f]{1,200}$"  # noqa: S105 - a pattern


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Policy(_Strict):
    """Rules for the whole tenant's configuration."""

    require_confirmation_for_writes: bool = Field(
        False, description="Every tool that writes must require confirmation."
    )
    time_zone: str = Field(
        "UTC",
        max_length=64,
        description="The IANA time zone where the tenant's quota days and months begin.",
    )

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zone(value)
        except TriggerRuleError:
            raise ValueError(
                "Give an IANA time zone name, such as Europe/Lisbon, America/New_York or UTC."
            ) from None
        return value


class Connection(_Strict):
    """A provider connection. Its API key is named by `secret`, never written here."""

    name: str = Field(min_length=1, max_length=100)
    kind: Literal["anthropic", "openai", "openai_compatible", "offline"]
    preset: str = Field("", max_length=20, description="For openai_compatible: the service.")
    base_url: str = Field("", max_length=200, description="Empty: the service's default.")
    secret: str | None = Field(None, pattern=SECRET_NAME_PATTERN, description="The API key.")
    extra_headers: dict[str, str] = Field(default_factory=dict)
    default_model: str = Field("", max_length=200)
    allowed_models: list[str] = Field(default_factory=list, description="Empty: any.")
    timeout_s: float = Field(60.0, gt=0, le=600)
    max_retries: int = Field(3, ge=0, le=10)
    default: bool = Field(False, description="The tenant's default connection (at most one).")


class Confirmation(_Strict):
    required: bool = Field(False, description="A person approves each call before it runs.")


class ToolEntry(_Strict):
    """A tool definition: an HTTP call described in `config`, or a built-in's tenant alias."""

    name: str = Field(pattern=NAME_PATTERN.pattern)
    kind: Literal["http", "builtin"] = "http"
    description: str = Field("", max_length=10_000)
    input_schema: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    # Checked by kind by the compiler: HttpToolConfig for http, BuiltinConfig for builtin
    # (the published schema says so with if/then).
    config: dict[str, Any] = Field(default_factory=dict)
    secret: str | None = Field(
        None, pattern=SECRET_NAME_PATTERN, description="The credential of config.auth."
    )
    tags: list[str] = Field(default_factory=list)
    effect: Literal["none", "read", "write", "destructive"] | None = Field(
        None, description="Empty: derived (GET reads, other methods write)."
    )
    idempotent: bool | None = None
    confirmation: Confirmation = Field(default_factory=Confirmation)
    timeout_s: float = Field(30.0, gt=0, le=3600)
    rate_limit_per_minute: int | None = Field(None, ge=1, le=100_000)
    enabled: bool = True
    depends_on: dict[str, Dependency] = Field(default_factory=dict)
    examples: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=20,
        description='Self-tests: [{"arguments": {...}, "expect": {"contains": "..."}}].',
    )


class ToolImportEntry(_Strict):
    """HTTP tools made from an OpenAPI document's operations each time the configuration
    document is applied (docs/tool-import.md), as if listed under `tools`: the document is
    fetched through the egress guard. A tool that sends a credential keeps the secret
    stored on the tool of its name (`tool:<name>`); store it there first."""

    openapi_url: str = Field(
        max_length=2000, description="Where the OpenAPI 3.0/3.1 or Swagger 2.0 document is."
    )
    base_url: str | None = Field(
        None, max_length=2000, description="The API's base URL, replacing the document's servers."
    )
    operations: list[str] = Field(
        min_length=1,
        max_length=500,
        description='The operations to make tools of: operationIds, "GET /path" or tool names.',
    )


class AgentTools(_Strict):
    all: bool = Field(True, description="Every tool of the tenant; off: names and tags only.")
    names: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)


class AgentApproval(_Strict):
    policy: Literal["flagged", "writes", "never"] = "flagged"
    deciders: Literal["starter", "admins", "group"] = "starter"
    group: str | None = Field(None, max_length=100, description="With deciders: group.")
    not_starter: bool = False


class FallbackEntry(_Strict):
    """A connection and model an agent's model calls may go to (docs/fallback.md)."""

    connection: str = Field(min_length=1, max_length=100, description="A connection's name.")
    model: str = Field("", max_length=200, description="Empty: the connection's default.")


class AgentCompaction(_Strict):
    """Long conversations: older turns summarised by a model (docs/agents.md)."""

    threshold: int | None = Field(
        None,
        ge=MIN_THRESHOLD_TOKENS,
        le=MAX_THRESHOLD_TOKENS,
        description="Tokens of history above which older turns are summarised. Empty: the "
        "platform's default (HISTORY_TOKEN_BUDGET).",
    )
    connection: str | None = Field(
        None, max_length=100, description="The summarising connection. Empty: the agent's own."
    )
    model: str = Field(
        "",
        max_length=200,
        description="The summarising model. Empty: the agent's own (with another connection: "
        "its default).",
    )


class CrewCompaction(_Strict):
    """A crew's long conversations: as an agent's; empty settings mean the tenant's default
    connection and its default model (a hierarchical crew: its manager's settings)."""

    threshold: int | None = Field(
        None,
        ge=MIN_THRESHOLD_TOKENS,
        le=MAX_THRESHOLD_TOKENS,
        description="Tokens of history above which older turns are summarised. Empty: the "
        "platform's default (HISTORY_TOKEN_BUDGET).",
    )
    connection: str | None = Field(
        None, max_length=100, description="The summarising connection. Empty: the default."
    )
    model: str = Field(
        "", max_length=200, description="The summarising model. Empty: the connection's default."
    )


SKILL_PIN_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*@(latest|[1-9][0-9]{0,8})$"


class AgentPublish(_Strict):
    """Publishing only what passes (docs/evaluations.md): a change is a draft until it passes."""

    evaluation: str | None = Field(
        None, max_length=100, description="A dataset every change must pass. Empty: none."
    )
    threshold: float = Field(1.0, ge=0, le=1, description="The share of cases to pass.")


class AgentEntry(_Strict):
    slug: str = Field(pattern=SLUG_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    instructions: str = ""
    connection: str | None = Field(None, description="Empty: the tenant's default connection.")
    model: str = Field("", max_length=200, description="Empty: the connection's default.")
    fallbacks: list[FallbackEntry] = Field(
        default_factory=list,
        max_length=10,
        description="Tried in order when the connection fails with a retryable error.",
    )
    load_balancing: Literal["", "round_robin", "least_in_flight"] = Field(
        "", description="How the fallbacks serving the agent's own model share its load."
    )
    temperature: float | None = Field(None, ge=0, le=2)
    max_rounds: int = Field(10, ge=1, le=100)
    max_tool_calls: int = Field(50, ge=0, le=32767)
    max_tokens_per_run: int | None = Field(None, ge=0, le=2_147_483_647)
    tools: AgentTools = Field(default_factory=AgentTools)
    approval: AgentApproval = Field(default_factory=AgentApproval)
    memory: bool = False
    memory_scope: Literal["person", "agent", "tenant"] = Field(
        "person",
        description="Whose memory its runs keep: each person's own, the agent's (shared by "
        "everyone using it), or the tenant's (docs/memory.md).",
    )
    memory_retention_days: int | None = Field(
        None, ge=1, le=36500, description="Facts are forgotten after this many days. Empty: kept."
    )
    memory_key_runs: bool = Field(
        False, description="API-key runs acting for no member get memory: the key's own."
    )
    results_without_tools: bool = Field(
        False, description="Answer from tool results with no tools offered (one round of tools)."
    )
    code_mode: bool = Field(
        False, description="Offer run_code: a sandboxed program calling the agent's tools."
    )
    compaction: AgentCompaction = Field(default_factory=AgentCompaction)
    output_schema: dict[str, Any] | None = None
    kind: str = Field("orchestrator", max_length=40)
    remote_url: str = Field("", max_length=200)
    remote_command: str = Field(
        "", max_length=64, description="Instead of remote_url: a command the operator allows."
    )
    verifier_tool: str = Field(
        "", max_length=64, description="A tool that checks each succeeded run's outcome."
    )
    secret: str | None = Field(None, pattern=SECRET_NAME_PATTERN, description="Remote token.")
    active: bool = True
    skills: list[Annotated[str, Field(pattern=SKILL_PIN_PATTERN)]] = Field(
        default_factory=list,
        max_length=50,
        description="Installed, approved skills it uses: name@N, or name@latest (docs/skills.md).",
    )
    publish: AgentPublish = Field(default_factory=AgentPublish)


ALIAS_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,49}$"


class ModelAliasEntry(_Strict):
    """A gateway model `alias/<name>`: connection/model pairs tried in order on a retryable
    failure, those serving the first pair's model sharing its load (docs/fallback.md)."""

    name: str = Field(pattern=ALIAS_NAME_PATTERN)
    targets: list[FallbackEntry] = Field(min_length=1, max_length=10)
    load_balancing: Literal["", "round_robin", "least_in_flight"] = ""


def amount_shown(value: Decimal) -> int | float | str:
    """A stored amount as a document writes it: a number when a JSON number holds it
    exactly (2.5, 200000), else its decimal text; the same value always the same way, so an
    export and an import compare equal."""
    value = value.normalize()
    if value == value.to_integral_value():
        return int(value)
    as_float = float(value)
    return as_float if Decimal(repr(as_float)) == value else format(value, "f")


# A decimal amount: written as a number (or its text, for precision a number lacks).
Amount = Annotated[Decimal, PlainSerializer(amount_shown, when_used="json")]
Price = Annotated[Amount, Field(max_digits=10, decimal_places=4)]


class PriceEntry(_Strict):
    """A tenant's price for a model, or for every model whose id begins with `model`: it
    replaces the built-in price of that entry (docs/cost.md). US dollars per million
    tokens; ranges as a price's page and REST check them."""

    provider: str = Field(
        min_length=1,
        max_length=20,
        description="The price table: anthropic, or an OpenAI-compatible service (openai, "
        "xai, openrouter, ...).",
    )
    model: str = Field(min_length=1, max_length=200)
    input: Price
    output: Price
    cached_input: Price
    cache_write: Price


class QuotaEntry(_Strict):
    """A limit that blocks (docs/quotas.md): what the tenant, a member (by username), an API
    key (by name) or an agent (by slug) may use of a metric per calendar day or month (UTC)."""

    scope: Literal["tenant", "member", "api_key", "agent"]
    member: str | None = Field(None, max_length=150, description="scope member: a username.")
    api_key: str | None = Field(None, max_length=100, description="scope api_key: the key's name.")
    agent: str | None = Field(None, max_length=50, description="scope agent: its slug.")
    metric: Literal["tokens", "cost"]
    period: Literal["day", "month"]
    limit: Annotated[Amount, Field(max_digits=18, decimal_places=6)] = Field(
        description="Tokens (a whole number) or US dollars."
    )
    active: bool = True


def price_name(entry: dict[str, Any]) -> str:
    """How a document names a price (it has no name of its own): `openai/gpt-4o`."""
    return f"{entry.get('provider')}/{entry.get('model')}"


def quota_name(entry: dict[str, Any]) -> str:
    """How a document names a quota (one per target, metric and period):
    `tenant/tokens/day`, `agent:support/cost/month`, `member:alice/tokens/day`."""
    scope = entry.get("scope")
    who = scope if scope == "tenant" else f"{scope}:{entry.get(scope)}"
    return f"{who}/{entry.get('metric')}/{entry.get('period')}"


class TriggerEntry(_Strict):
    """Runs of an agent, crew or workflow started on a schedule or by a signed webhook
    (docs/triggers.md). A webhook's signing secret is never in a document: an import that
    creates one answers with its new secret, once."""

    name: str = Field(min_length=1, max_length=100)
    kind: Literal["schedule", "webhook"]
    agent: str | None = Field(None, description="An agent's slug (or crew, or workflow).")
    crew: str | None = Field(None, description="A crew's slug (or agent, or workflow).")
    workflow: str | None = Field(
        None,
        description="A workflow's slug (or agent, or crew); its input is the rendered "
        "template read as JSON, e.g. {{payload}}.",
    )
    cron: str = Field("", max_length=100, description="A schedule's cron expression.")
    timezone: str = Field("UTC", max_length=64, description="An IANA time zone.")
    input_template: str = Field(
        min_length=1,
        max_length=10_000,
        description="The run's input; {{payload.a.b}}, {{trigger.name}}, {{fired_at}}.",
    )
    enabled: bool = True
    run_as: str | None = Field(
        None, max_length=150, description="The username of the member the runs are for."
    )


class CrewEntry(_Strict):
    slug: str = Field(pattern=SLUG_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    mode: Literal["sequential", "parallel", "hierarchical"] = "sequential"
    members: list[str] = Field(default_factory=list, description="Agent slugs, in order.")
    manager: str | None = Field(None, description="An agent slug; hierarchical crews need one.")
    max_delegations: int = Field(10, ge=0, le=32767)
    max_depth: int = Field(3, ge=0, le=32767)
    token_budget: int | None = Field(None, ge=0, le=2_147_483_647)
    compaction: CrewCompaction = Field(default_factory=CrewCompaction)
    active: bool = True
    publish: AgentPublish = Field(default_factory=AgentPublish)


class WorkflowEntry(_Strict):
    """A workflow the tenant declares (docs/workflows.md): its document is compiled with the
    document's tools and agents, and the tenant's."""

    slug: str = Field(pattern=SLUG_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    definition: dict[str, Any] = Field(
        description="The workflow: input, steps, output (the Workflow schema)."
    )
    expose_as_tool: bool = Field(False, description="Offered to agents and over MCP as a tool.")
    enabled: bool = True


MCP_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,49}$"
TOOL_PREFIX_PATTERN = r"^([a-z][a-z0-9_]{0,30})?$"


class McpServer(_Strict):
    """An MCP server connection (a context provider): its tools join the tenant's registry
    as `<tool_prefix>__<name>`. Its auth header is named by `secret`, never written here."""

    name: str = Field(pattern=MCP_NAME_PATTERN)
    url: str = Field(min_length=1, max_length=500, description="The streamable HTTP endpoint.")
    secret: str | None = Field(
        None, pattern=SECRET_NAME_PATTERN, description="The Authorization header's value."
    )
    auth_mode: Literal["none", "header", "oauth_tenant", "oauth_user"] = Field(
        "none",
        description="none; header (the secret); oauth_tenant (an admin connects one account "
        "for everyone); oauth_user (each person connects their own). With a secret, none "
        "reads as header. OAuth tokens are connected on the platform, never written here.",
    )
    oauth_scope: str = Field("", max_length=500, description="OAuth scopes; empty: the server's.")
    oauth_client_id: str = Field(
        "", max_length=500, description="A pre-registered OAuth client ID; empty: registered."
    )
    enabled: bool = True
    tool_prefix: str = Field(
        "", pattern=TOOL_PREFIX_PATTERN, description="Empty: derived from the name."
    )
    allowed_tool_names: list[str] = Field(
        default_factory=list, description="Remote tool names to import; empty: all."
    )
    context_resource_uri: str = Field(
        "", max_length=500, description="An MCP resource whose text becomes prompt context."
    )
    tool_examples: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict,
        max_length=200,
        description="Self-tests per remote tool name (the protocol carries no examples).",
    )
    timeout_s: float = Field(30.0, gt=0, le=300)
    domains: list[str] = Field(
        default_factory=list, max_length=10, description="Capability domains it covers."
    )


class KnowledgeBaseEntry(_Strict):
    """A knowledge base's settings (its documents stay where they are) and the agents that
    search it."""

    slug: str = Field(pattern=SLUG_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    embedder: Literal["static", "local", "provider", "lexical"] = Field(
        "static",
        description="static: built in, 256 dims; local: all-MiniLM-L6-v2 (an optional "
        "install), 384 dims; provider: a connection's model; lexical: none.",
    )
    connection: str | None = Field(None, description="For provider embeddings: its name.")
    embedding_model: str = Field("", max_length=200, description="For provider embeddings.")
    dimensions: int | None = Field(
        None, ge=1, le=4000, description="For provider embeddings: requested from the model."
    )
    chunk_size: int = Field(400, ge=50, le=2000, description="Tokens per chunk.")
    chunk_overlap: int = Field(60, ge=0, le=2000, description="Smaller than chunk_size.")
    agents: list[str] = Field(default_factory=list, description="Slugs of the agents using it.")
    domains: list[str] = Field(
        default_factory=lambda: ["knowledge", "documents"],
        max_length=10,
        description="Capability domains it covers.",
    )


RETENTION_MAX_DAYS = 36500


def _retention_days(what: str) -> Any:
    return Field(
        None,
        ge=0,
        le=RETENTION_MAX_DAYS,
        description=f"Days {what} are kept: 0 forever; null follows the platform's default.",
    )


class RetentionEntry(_Strict):
    """How long the tenant's data is kept before the periodic purge removes it
    (docs/operations.md, "Retention"). Legal holds are not configuration: never here."""

    run_days: int | None = _retention_days("runs' events (the run's summary and cost stay)")
    conversation_days: int | None = _retention_days(
        "conversations untouched (with their messages and files)"
    )
    attachment_days: int | None = _retention_days("attached files")
    audit_days: int | None = _retention_days("audit log entries")


class ConfigDocument(_Strict):
    """A tenant's configuration. Lists hold the objects the document manages; objects it
    does not name are left alone unless the import prunes."""

    version: Literal[1] = Field(description="The document format's version.")
    policy: Policy = Field(default_factory=Policy)
    # Bounded so that compiling a document stays well under a second or two: each JSON
    # Schema in it is checked against the metaschema (milliseconds apiece).
    connections: list[Connection] = Field(default_factory=list, max_length=100)
    model_aliases: list[ModelAliasEntry] = Field(default_factory=list, max_length=100)
    tools: list[ToolEntry] = Field(default_factory=list, max_length=500)
    tool_imports: list[ToolImportEntry] = Field(
        default_factory=list,
        max_length=20,
        description="Tools made from OpenAPI documents when the document is applied; an "
        "export lists the tools they made under `tools` instead.",
    )
    skills: list[SkillEntry] = Field(
        default_factory=list,
        max_length=200,
        description="Installed skills and their versions (docs/skills.md); never pruned.",
    )
    agents: list[AgentEntry] = Field(default_factory=list, max_length=500)
    crews: list[CrewEntry] = Field(default_factory=list, max_length=200)
    workflows: list[WorkflowEntry] = Field(default_factory=list, max_length=200)
    prices: list[PriceEntry] = Field(default_factory=list, max_length=500)
    quotas: list[QuotaEntry] = Field(default_factory=list, max_length=200)
    triggers: list[TriggerEntry] = Field(default_factory=list, max_length=200)
    mcp_servers: list[McpServer] = Field(default_factory=list, max_length=100)
    knowledge_bases: list[KnowledgeBaseEntry] = Field(default_factory=list, max_length=200)
    retention: RetentionEntry | None = Field(
        None, description="The tenant's retention; absent: left as it is."
    )

    def as_data(self) -> dict[str, Any]:
        """The document as plain JSON data, every field written (defaults too)."""
        return self.model_dump(mode="json", by_alias=True)


def document_json_schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of version 1. A tool's `config` is an
    HttpToolConfig for kind http and a BuiltinConfig for kind builtin."""
    schema = ConfigDocument.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    for model in (HttpToolConfig, BuiltinConfig):
        own = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(own.pop("$defs", {}))
        defs[model.__name__] = own
    workflow = workflow_json_schema()
    defs.update(workflow.pop("$defs", {}))
    defs["Workflow"] = workflow
    defs["WorkflowEntry"]["properties"]["definition"] = {
        "$ref": "#/$defs/Workflow",
        "description": defs["WorkflowEntry"]["properties"]["definition"]["description"],
    }
    defs["ToolEntry"]["allOf"] = [
        {
            "if": {"properties": {"kind": {"const": "builtin"}}, "required": ["kind"]},
            "then": {"properties": {"config": {"$ref": "#/$defs/BuiltinConfig"}}},
            "else": {"properties": {"config": {"$ref": "#/$defs/HttpToolConfig"}}},
        }
    ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
    }
