"""A tenant's configuration as one document: export, plan (compile and diff) and apply.

The document's format and compiler live in `agents/runtime/config/` (no Django); this module
reads the tenant's objects into a document and writes a document back through the apps'
own services (`providers.services.connection_save`, `tools.services.tool_definition_save`,
`agents.services.agent_save`/`crew_save`), so every model rule runs as it does for a form or
REST. agents sits above tools and providers, so this is the one app that may see all three.

- Objects are matched by name (connections, tools) or slug (agents, crews). Only the objects
  the document names are created or changed; the others stay unless `prune=True`, which
  deletes them.
- Secrets are never in a document. An object with a stored secret is exported with
  `secret: <kind>:<name>` (`tool:crm`); importing that reference keeps the stored secret of
  the object of that name, an object without `secret` has its stored secret cleared, and a
  reference to a secret this tenant does not hold is refused (store it on the object's page
  or REST resource first). Secrets are per object in this version: a reference names its
  own object.
- Applying is one transaction, and idempotent: an object equal to its document entry is not
  written, so applying the same document twice changes nothing the second time.
- A dry run is the same apply in a transaction that is always rolled back: it refuses
  exactly what the import refuses, at the same paths, and leaves no trace.
- Prices, quotas and triggers go through their own services too (`price_save`,
  `quotas.quota_save`, `triggers.trigger_save`, the latter two told who imports). A webhook
  trigger's signing secret is never in a document: creating one makes a new secret, which
  the plan that applied it carries once (`new_secrets`), as REST's and the page's answer to
  a new webhook does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count

from agents import quotas, skills, workflows
from agents.config_tool_imports import ImportedTools, tool_imports_expanded
from agents.models import Agent, Crew, Dataset, Quota, Trigger, TriggerKind, WorkflowDefinition
from agents.runtime.config.compiler import (
    CompiledConfig,
    ConfigInvalid,
    ConfigProblem,
    KnownNames,
    compile_config,
)
from agents.runtime.config.document import VERSION, amount_shown, price_name, quota_name
from agents.runtime.config.loading import DocumentUnreadable, Format, load_document
from agents.runtime.kinds import KINDS
from agents.services import agent_delete, agent_save, crew_delete, crew_save
from agents.tool_sources import agent_tool_names
from agents.triggers import SavedTrigger, hook_path, trigger_delete, trigger_save
from base import versions
from providers.models import ModelAlias, ModelPrice, ProviderConnection
from providers.services import (
    connection_delete,
    connection_save,
    model_alias_delete,
    model_alias_save,
    price_delete,
    price_save,
)
from tenancy.models import ApiKey, Role, Tenant, TenantGroup
from tenancy.policy import Principal
from tenancy.records.saving import SaveConflict
from tenancy.services import tenant_policy_set, tenant_time_zone_set
from tools.definition_checks import definition_shape
from tools.loader import tool_names_besides_definitions
from tools.mcp_connections import mcp_connection_delete, mcp_connection_save
from tools.models import McpServerConnection, ToolDefinition
from tools.runtime.credential_leaks import redacted_url, redacted_values
from tools.runtime.definitions import WRITE_EFFECTS, effective_effect
from tools.runtime.dependencies import ToolShape, dependency_problems
from tools.services import tool_definition_delete, tool_definition_save

# The sections a document holds, filled by `register_document_section` (the built-in ones
# below, rag's knowledge bases from RagConfig.ready): in the order they are written and
# applied (an object after those it refers to); deleted in the reverse order.
SECTIONS: list[str] = []
KEYS: dict[str, str] = {}  # section -> the field naming its objects
# section -> how an entry is named, for sections whose objects have no name of their own
NAMERS: dict[str, Callable[[dict[str, Any]], str]] = {}
SECRET_PREFIX = {
    "connections": "connection",
    "tools": "tool",
    "agents": "agent",
    "mcp_servers": "mcp",
}


def secret_name(section: str, name: str) -> str:
    """The name a document gives the stored secret of an object (`tool:crm`)."""
    return f"{SECRET_PREFIX[section]}:{name}"


# -- one table: each document field and the model field it is stored in ------------------
_KEEP = object()  # a write's answer: leave the model field as it is


def entry_name(section: str, entry: dict[str, Any]) -> str:
    """The name of a document entry: its key field's value (a price's `openai/gpt-4o`,
    a quota's `agent:support/tokens/day`)."""
    namer = NAMERS.get(section)
    return namer(entry) if namer is not None else entry[KEYS[section]]


@dataclass(frozen=True)
class Refs:
    """The tenant's objects a document entry refers to by name, for writing it, and who
    imports (`by`: whom a trigger's service asks about the member its runs are for)."""

    connections: dict[str, ProviderConnection]
    agents: dict[str, Agent]
    groups: dict[str, TenantGroup]
    crews: dict[str, Crew] = field(default_factory=dict)
    workflows: dict[str, WorkflowDefinition] = field(default_factory=dict)
    members: dict[str, Any] = field(default_factory=dict)  # username -> user
    api_keys: dict[str, ApiKey] = field(default_factory=dict)  # names held by one key
    by: Principal | None = None
    datasets: dict[str, Dataset] = field(default_factory=dict)  # an agent's required evaluation


@dataclass(frozen=True)
class NewSecret:
    """A secret an import made (a new webhook trigger's): in the answer that applied it,
    once, never again (as the trigger's page and REST show a new webhook's)."""

    section: str
    name: str
    secret: str
    note: str

    def as_dict(self) -> dict[str, str]:
        return {"section": self.section, "name": self.name, "secret": self.secret,
                "note": self.note}  # fmt: skip


@dataclass(frozen=True)
class DocField:
    """A field of a document entry (`key`, dotted where nested: "confirmation.required")
    and the model field it is stored in (`attr`; None: not a plain field, such as a crew's
    members). `read` gives the document's value of an object (default: the attribute's);
    `write` the model's value of a document value (default: as is; `_KEEP`: unchanged)."""

    key: str
    attr: str | None
    read: Callable[[Any], Any] | None = None
    write: Callable[[Any, Refs], Any] | None = None
    # The section whose objects it names (a name or a list of names) by a stored relation,
    # which follows a rename of the object (a trigger's agent, a crew's members).
    refers_to: str | None = None


def secret_field(section: str, key: str, attr: str) -> DocField:
    """A stored secret: exported by name, kept by a reference, cleared by its absence."""
    return DocField(
        "secret",
        attr,
        read=lambda obj: secret_name(section, getattr(obj, key)) if getattr(obj, attr) else None,
        write=lambda value, refs: None if value is None else _KEEP,
    )


def reference_field(key: str, attr: str, among: str, name: str = "name") -> DocField:
    """A reference to another object by its name (`name`: its naming field): the related
    object `attr`, found among the references' `among` ("connections") when written."""
    return DocField(
        key,
        attr,
        read=lambda obj: getattr(related, name) if (related := getattr(obj, attr)) else None,
        write=lambda value, refs: getattr(refs, among).get(value) if value else None,
        refers_to=among,
    )


def amount_field(key: str, attr: str) -> DocField:
    """A decimal amount: written as `amount_shown` does (the same value always the same
    way), stored as the decimal of its text (a float's binary digits never reach the model)."""
    return DocField(
        key,
        attr,
        read=lambda obj: None if (value := getattr(obj, attr)) is None else amount_shown(value),
        write=lambda value, refs: Decimal(str(value)),
    )


@dataclass(frozen=True)
class DocSection:
    """A kind of object a document holds: its `name` (the document's key), the field naming
    its objects, its model and the table of its fields; the app's services that save and
    delete one, which take the object by the keyword `noun` (`save_extra`: more keywords
    from the entry, such as a crew's members). The compiled import has checked the end
    state, so its saves skip the whole-graph check (`graph_checked=True`)."""

    name: str
    key: str
    model: type
    fields: tuple[DocField, ...]
    save: Callable[..., Any]
    delete: Callable[..., None]
    noun: str
    related: tuple[str, ...] = ()  # read with the rows (select_related)
    prefetch: tuple[str, ...] = ()
    save_extra: Callable[[dict[str, Any], Refs], dict[str, Any]] | None = None
    # Objects without a name of their own: how an entry is named, and the order they are
    # written in (model fields; default: `key`).
    name_of: Callable[[dict[str, Any]], str] | None = None
    order: tuple[str, ...] = ()
    # What a create answers with once (a new webhook's secret), from the save's result,
    # and what the plan says of it beforehand (from the entry).
    shown_once: Callable[[Any, str], NewSecret | None] | None = None
    create_note: Callable[[dict[str, Any]], str] | None = None
    acts: bool = False  # its services take who acts (`by`, the importer's Principal)
    pruned: bool = True  # False: an import never deletes its objects (skills)
    # How an entry is compared and shown in a plan (default: as it is), and why the
    # document's entries cannot be applied to the tenant as it stands (default: no check).
    compared: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    check: Callable[[Tenant, list[dict[str, Any]]], list[ConfigProblem]] | None = None

    def rows(self, tenant: Tenant) -> Any:
        """The tenant's objects by name: one query (and one per prefetched relation)."""
        objects = self.model.objects.filter(tenant=tenant).select_related(*self.related)
        return objects.prefetch_related(*self.prefetch).order_by(*(self.order or (self.key,)))

    def save_object(
        self, tenant: Tenant, obj: Any, changes: dict[str, Any], entry: dict[str, Any], refs: Refs
    ) -> Any:
        extra = self.save_extra(entry, refs) if self.save_extra is not None else {}
        if self.acts:
            extra["by"] = refs.by
        target = {self.noun: obj}
        return self.save(tenant=tenant, **target, changes=changes, graph_checked=True, **extra)

    def delete_object(self, tenant: Tenant, obj: Any, by: Principal) -> None:
        self.delete(tenant=tenant, **{self.noun: obj}, **({"by": by} if self.acts else {}))


_REGISTERED: dict[str, DocSection] = {}
FIELDS: dict[str, tuple[DocField, ...]] = {}
# Model field -> where it is in a document entry, for the model's own errors.
FIELD_PATHS: dict[str, dict[str, str]] = {}


def register_document_section(section: DocSection) -> None:
    """Add a section to the document (once): exported, diffed, applied and checked on every
    save of its model like the built-in ones. An app registers its own at startup."""
    if section.name in _REGISTERED:
        return
    _REGISTERED[section.name] = section
    SECTIONS.append(section.name)
    KEYS[section.name] = section.key
    if section.name_of is not None:
        NAMERS[section.name] = section.name_of
    FIELDS[section.name] = section.fields
    FIELD_PATHS[section.name] = {
        f.attr: f.key for f in section.fields if f.attr is not None and f.attr != f.key
    }


@dataclass(frozen=True)
class DocSetting:
    """A tenant-wide setting the document holds as one mapping, not a list of named objects,
    kept by an app above agents (lifecycle's `retention`): `read(tenant)` gives its stored
    values as document data; `write(tenant=, changes=, actor=)` sets those that changed (a
    ValidationError naming its fields refuses, and the import rolls back). A document without
    it leaves it as it is; pruning never touches it."""

    name: str
    read: Callable[[Tenant], dict[str, Any]]
    write: Callable[..., Any]


_SETTINGS: dict[str, DocSetting] = {}


def register_document_setting(setting: DocSetting) -> None:
    """Add a setting to the document (once), exported, planned and applied with the rest. Its
    shape is a field of ConfigDocument (agents.runtime.config.document)."""
    _SETTINGS.setdefault(setting.name, setting)


def document_section(name: str) -> DocSection:
    return _REGISTERED[name]


def section_of_model(model: type) -> str | None:
    """The section holding objects of `model`, None for a model no document holds."""
    return next((s.name for s in _REGISTERED.values() if s.model is model), None)


_FIELDS: dict[str, tuple[DocField, ...]] = {
    "connections": (
        DocField("name", "name"),
        DocField("kind", "kind"),
        DocField("preset", "preset"),
        DocField("base_url", "base_url", read=lambda c: redacted_url(c.base_url)),
        secret_field("connections", "name", "api_key"),
        DocField("extra_headers", "extra_headers", read=lambda c: redacted_values(c.extra_headers)),
        DocField("default_model", "default_model"),
        DocField("allowed_models", "allowed_models", read=lambda c: list(c.allowed_models)),
        DocField("timeout_s", "timeout_s"),
        DocField("max_retries", "max_retries"),
        DocField("default", "is_default"),
    ),
    "model_aliases": (
        DocField("name", "name"),
        DocField("targets", "targets", read=lambda a: _fallbacks_shown(a.targets)),
        DocField("load_balancing", "load_balancing"),
    ),
    "tools": (
        DocField("name", "name"),
        DocField("kind", "kind"),
        DocField("description", "description"),
        # A built-in alias runs with the built-in's schema; whatever the row holds is unused.
        DocField(
            "input_schema",
            "input_schema",
            read=lambda t: {} if t.kind == "builtin" else t.input_schema,
        ),
        DocField("output_schema", "output_schema"),
        DocField("config", "config", read=lambda t: _tool_config_shown(t.config)),
        secret_field("tools", "name", "secret"),
        DocField("tags", "tags", read=lambda t: list(t.tags)),
        DocField("effect", "effect", read=lambda t: t.effect or None, write=lambda v, r: v or ""),
        DocField("idempotent", "idempotent"),
        DocField("confirmation.required", "requires_approval"),
        DocField("timeout_s", "timeout_s"),
        DocField("rate_limit_per_minute", "rate_limit_per_minute"),
        DocField("enabled", "enabled"),
        DocField("depends_on", "depends_on", read=lambda t: t.depends_on or {}),
        DocField("examples", "examples", read=lambda t: list(t.examples or [])),
    ),
    # Installed skills by name, their versions by reference (agents/skills/document.py).
    "skills": (
        DocField("name", "name"),
        DocField("versions", None, read=lambda s: skills.skill_version_entries(s)),
    ),
    "agents": (
        DocField("slug", "slug"),
        DocField("name", "name"),
        DocField("description", "description"),
        DocField("instructions", "instructions"),
        reference_field("connection", "provider_connection", "connections"),
        DocField("model", "model"),
        DocField("fallbacks", "fallbacks", read=lambda a: _fallbacks_shown(a.fallbacks)),
        DocField("load_balancing", "load_balancing"),
        DocField("temperature", "temperature"),
        DocField("max_rounds", "max_rounds"),
        DocField("max_tool_calls", "max_tool_calls"),
        DocField("max_tokens_per_run", "max_tokens_per_run"),
        DocField("tools.all", "use_all_tools"),
        DocField("tools.names", "tool_names", read=lambda a: list(a.tool_names)),
        DocField("tools.tags", "tool_tags", read=lambda a: list(a.tool_tags)),
        DocField("tools.exclude", "tool_exclude", read=lambda a: list(a.tool_exclude)),
        DocField("approval.policy", "approval_policy"),
        DocField("approval.deciders", "approval_deciders"),
        reference_field("approval.group", "approval_group", "groups"),
        DocField("approval.not_starter", "approval_not_starter"),
        DocField("memory", "memory"),
        DocField("memory_scope", "memory_scope"),
        DocField("memory_retention_days", "memory_retention_days"),
        DocField("memory_key_runs", "memory_key_runs"),
        DocField("results_without_tools", "results_without_tools"),
        DocField("code_mode", "code_mode"),
        DocField("compaction.threshold", "compaction_threshold"),
        reference_field("compaction.connection", "compaction_connection", "connections"),
        DocField("compaction.model", "compaction_model"),
        DocField("output_schema", "output_schema"),
        DocField("kind", "kind"),
        DocField("remote_url", "remote_url", read=lambda a: redacted_url(a.remote_url)),
        DocField("remote_command", "remote_command"),
        DocField("verifier_tool", "verifier_tool"),
        secret_field("agents", "slug", "remote_token"),
        DocField("active", "active"),
        # Saved through agent_skills_set (`_agent_save`), not a model field.
        DocField("skills", None, read=lambda a: skills.pin_labels_of(a)),
        reference_field("publish.evaluation", "required_evaluation", "datasets"),
        DocField("publish.threshold", "pass_threshold"),
    ),
    "crews": (
        DocField("slug", "slug"),
        DocField("name", "name"),
        DocField("description", "description"),
        DocField("mode", "mode"),
        DocField(
            "members",
            None,
            read=lambda c: [agent.slug for agent in _crew_members(c)],
            refers_to="agents",
        ),
        reference_field("manager", "manager", "agents", name="slug"),
        DocField("max_delegations", "max_delegations"),
        DocField("max_depth", "max_depth"),
        DocField("token_budget", "token_budget"),
        DocField("compaction.threshold", "compaction_threshold"),
        reference_field("compaction.connection", "compaction_connection", "connections"),
        DocField("compaction.model", "compaction_model"),
        DocField("active", "active"),
        reference_field("publish.evaluation", "required_evaluation", "datasets"),
        DocField("publish.threshold", "pass_threshold"),
    ),
    "workflows": (
        DocField("slug", "slug"),
        DocField("name", "name"),
        DocField("description", "description"),
        DocField("definition", "definition"),
        DocField("expose_as_tool", "expose_as_tool"),
        DocField("enabled", "enabled"),
    ),
    "prices": (
        DocField("provider", "provider_kind"),
        DocField("model", "model"),
        amount_field("input", "input_price"),
        amount_field("output", "output_price"),
        amount_field("cached_input", "cached_input_price"),
        amount_field("cache_write", "cache_write_price"),
    ),
    "quotas": (
        DocField("scope", "scope"),
        reference_field("member", "user", "members", name="username"),
        reference_field("api_key", "api_key", "api_keys"),
        reference_field("agent", "agent", "agents", name="slug"),
        DocField("metric", "metric"),
        DocField("period", "period"),
        amount_field("limit", "limit"),
        DocField("active", "active"),
    ),
    # Never its secret, public id (its hook's address) or fire times: the tenant's own.
    "triggers": (
        DocField("name", "name"),
        DocField("kind", "kind"),
        reference_field("agent", "agent", "agents", name="slug"),
        reference_field("crew", "crew", "crews", name="slug"),
        reference_field("workflow", "workflow", "workflows", name="slug"),
        DocField("cron", "cron"),
        DocField("timezone", "timezone"),
        DocField("input_template", "input_template"),
        DocField("enabled", "enabled"),
        reference_field("run_as", "run_as", "members", name="username"),
    ),
    "mcp_servers": (
        DocField("name", "name"),
        DocField("url", "url", read=lambda m: redacted_url(m.url)),
        secret_field("mcp_servers", "name", "auth_header"),
        DocField("auth_mode", "auth_mode"),
        DocField("oauth_scope", "oauth_scope"),
        DocField("oauth_client_id", "oauth_client_id"),
        DocField("enabled", "enabled"),
        DocField("tool_prefix", "tool_prefix"),
        DocField(
            "allowed_tool_names", "allowed_tool_names", read=lambda m: list(m.allowed_tool_names)
        ),
        DocField("context_resource_uri", "context_resource_uri"),
        DocField("tool_examples", "tool_examples", read=lambda m: dict(m.tool_examples or {})),
        DocField("domains", "domains", read=lambda m: list(m.domains or [])),
        DocField("timeout_s", "timeout_s"),
    ),
}


def _fallbacks_shown(value: Any) -> Any:
    """An agent's fallbacks as the document writes them (each with its model), or a value
    that is not a list as it is (the compile refuses it at its path)."""
    if not isinstance(value, list):
        return value
    return [
        {"connection": e.get("connection"), "model": e.get("model", "")}
        if isinstance(e, dict)
        else e
        for e in value
    ]


def _crew_members(crew: Crew) -> list[Agent]:
    """A crew's members in order: those a save is about to set (`crew_save`), else stored."""
    pending = getattr(crew, "pending_members", None)
    if pending is not None:
        return list(pending)
    if crew.pk is None:
        return []
    return [member.agent for member in crew.members.all()]


def object_entry(section: str, obj: Any) -> dict[str, Any]:
    """An object's document entry, every field written."""
    entry: dict[str, Any] = {}
    for item in FIELDS[section]:
        value = item.read(obj) if item.read is not None else getattr(obj, item.attr)
        *parents, last = item.key.split(".")
        place = entry
        for parent in parents:
            place = place.setdefault(parent, {})
        place[last] = value
    return entry


def _model_changes(section: str, entry: dict[str, Any], refs: Refs) -> dict[str, Any]:
    """The model fields of a document entry (plain JSON data, as `as_data` gives it)."""
    changes = {}
    for item in FIELDS[section]:
        if item.attr is None:
            continue
        value: Any = entry
        for part in item.key.split("."):
            value = value[part]
        if item.write is not None:
            value = item.write(value, refs)
        if value is not _KEEP:
            changes[item.attr] = value
    return changes


def _tool_config_shown(config: Any) -> Any:
    """A tool's config without credentials a row stored before they were refused may hold
    in its URL or fixed values (such a document is refused on import, at that path)."""
    if not isinstance(config, dict):
        return config
    shown = dict(config)
    if isinstance(shown.get("url"), str):
        shown["url"] = redacted_url(shown["url"])
    if isinstance(fixed := config.get("fixed"), dict):
        shown["fixed"] = {
            key: redacted_values(value) if key in ("query", "headers") else value
            for key, value in fixed.items()
        }
    return shown


def _builtin_sections() -> None:
    for section in (
        DocSection(
            "connections", "name", ProviderConnection, _FIELDS["connections"],
            save=connection_save, delete=connection_delete, noun="connection",
        ),
        DocSection(
            "model_aliases", "name", ModelAlias, _FIELDS["model_aliases"],
            save=model_alias_save, delete=model_alias_delete, noun="alias",
        ),
        DocSection(
            "prices", "provider_kind", ModelPrice, _FIELDS["prices"],
            save=_price_save, delete=price_delete, noun="price", name_of=price_name,
            order=("provider_kind", "model"),
        ),
        DocSection(
            "mcp_servers", "name", McpServerConnection, _FIELDS["mcp_servers"],
            save=mcp_connection_save, delete=mcp_connection_delete, noun="connection",
        ),
        DocSection(
            "tools", "name", ToolDefinition, _FIELDS["tools"],
            save=tool_definition_save, noun="definition",
            # Its order among the import's deletions must not matter either.
            delete=partial(tool_definition_delete, graph_checked=True),
        ),
        DocSection(
            "skills", "name", skills.Skill, _FIELDS["skills"],
            save=skills.skill_document_save, delete=skills.skill_document_delete,
            noun="skill", acts=True, prefetch=("versions",), pruned=False,
            save_extra=lambda entry, refs: {"versions": entry["versions"]},
            compared=skills.skill_entry_compared, check=skills.skill_document_problems,
        ),
        DocSection(
            "agents", "slug", Agent, _FIELDS["agents"],
            save=_agent_save, delete=agent_delete, noun="agent",
            related=("provider_connection", "approval_group", "required_evaluation"),
            prefetch=("skill_pins__skill", "skill_pins__version"),
            save_extra=lambda entry, refs: {"pins": entry.get("skills"), "by": refs.by},
        ),
        DocSection(
            "crews", "slug", Crew, _FIELDS["crews"],
            save=crew_save, delete=crew_delete, noun="crew",
            related=("manager", "required_evaluation"), prefetch=("members__agent",),
            save_extra=lambda entry, refs: {
                "members": [refs.agents[slug] for slug in entry["members"]], "by": refs.by,
            },
        ),
        DocSection(
            "workflows", "slug", WorkflowDefinition, _FIELDS["workflows"],
            save=workflows.workflow_save, delete=workflows.workflow_delete, noun="workflow",
        ),
        DocSection(
            "quotas", "scope", Quota, _FIELDS["quotas"],
            save=_quota_save, delete=_quota_delete, noun="quota", acts=True,
            related=("user", "api_key", "agent"), name_of=quota_name,
            order=("scope", "metric", "period", "user__username", "api_key__name", "agent__slug"),
        ),
        DocSection(
            "triggers", "name", Trigger, _FIELDS["triggers"],
            save=_trigger_save, delete=trigger_delete, noun="trigger", acts=True,
            related=("agent", "crew", "workflow", "run_as"), shown_once=_new_webhook_secret,
            create_note=_webhook_note,
        ),
    ):  # fmt: skip
        register_document_section(section)


def _agent_save(
    *,
    tenant: Tenant,
    agent: Agent | None,
    changes: dict[str, Any],
    graph_checked: bool,
    pins: list[str] | None = None,
    by: Principal | None = None,
) -> Agent:
    """An agent and its skills' pins (checked by the compiler: installed, approved)."""
    wanted = None if pins is None else [skills.parse_pin(pin) for pin in pins]
    return agent_save(
        tenant=tenant, agent=agent, changes=changes, pins=wanted, graph_checked=graph_checked,
        by=by,
    )  # fmt: skip


# -- the services of prices, quotas and triggers, as a section calls them ------------------
# Their rules are per object (no whole-graph check on their own saves): what the compiler
# checks of them it asks of the same rule functions (providers/runtime/price_rules.py,
# agents/runtime/quota_rules.py, agents/runtime/triggers.py).
def _price_save(
    *, tenant: Tenant, price: ModelPrice | None, changes: dict[str, Any], graph_checked: bool
) -> ModelPrice:
    return price_save(tenant=tenant, price=price, changes=changes)


def _quota_save(
    *, tenant: Tenant, quota: Quota | None, changes: dict[str, Any], graph_checked: bool,
    by: Principal,
) -> Quota:  # fmt: skip
    return quotas.quota_save(tenant=tenant, quota=quota, changes=changes, actor=by.initiator)


def _quota_delete(*, tenant: Tenant, quota: Quota, by: Principal) -> None:
    quotas.quota_delete(tenant=tenant, quota=quota, actor=by.initiator)


def _trigger_save(
    *, tenant: Tenant, trigger: Trigger | None, changes: dict[str, Any], graph_checked: bool,
    by: Principal,
) -> SavedTrigger:  # fmt: skip
    """Through `trigger_save`, whose rules include whom `by` may attribute runs to."""
    return trigger_save(tenant=tenant, by=by, trigger=trigger, changes=changes)


def _webhook_note(entry: dict[str, Any]) -> str:
    if entry.get("kind") != TriggerKind.WEBHOOK:
        return ""
    return (
        "A new signing secret is made: the answer that applies this shows it, once (never in "
        "a document)."
    )


def _new_webhook_secret(saved: Any, name: str) -> NewSecret | None:
    if not isinstance(saved, SavedTrigger) or not saved.secret:
        return None
    trigger = saved.trigger
    return NewSecret(
        "triggers",
        name,
        saved.secret,
        f"The signing secret of the new webhook trigger {name!r} (deliveries: POST "
        f"{hook_path(trigger)}), shown in this answer only. For a new one, rotate it on the "
        f"trigger's page or POST /api/v1/triggers/{trigger.pk}/rotate-secret.",
    )


_builtin_sections()


@dataclass
class TenantEntries:
    """The tenant's objects, by section and name, with their document entries."""

    objects: dict[str, dict[str, Any]]
    entries: dict[str, dict[str, dict[str, Any]]]


def tenant_entries(tenant: Tenant) -> TenantEntries:
    """A query or two per section (a crew's members and a knowledge base's agents are
    prefetched)."""
    rows = {section: list(_REGISTERED[section].rows(tenant)) for section in SECTIONS}
    objects: dict[str, dict[str, Any]] = {}
    entries: dict[str, dict[str, dict[str, Any]]] = {}
    for section, items in rows.items():
        objects[section], entries[section] = {}, {}
        for item in items:
            entry = object_entry(section, item)
            name = entry_name(section, entry)
            objects[section][name], entries[section][name] = item, entry
    return TenantEntries(objects, entries)


def policy_entry(tenant: Tenant) -> dict[str, Any]:
    return {
        "require_confirmation_for_writes": tenant.require_confirmation_for_writes,
        "time_zone": tenant.time_zone,
    }


def config_export(*, tenant: Tenant, skill_files: bool = False) -> dict[str, Any]:
    """The tenant's configuration as document data (version 1): every registered section
    (provider connections, MCP servers, tools, skills, agents, crews, knowledge bases),
    secrets by name only. Skill versions by reference, or (`skill_files`) with their files
    inline."""
    current = tenant_entries(tenant)
    exported = {
        "version": VERSION,
        "policy": policy_entry(tenant),
        **{section: list(current.entries[section].values()) for section in SECTIONS},
        **{name: setting.read(tenant) for name, setting in _SETTINGS.items()},
    }
    if skill_files and exported["skills"]:
        skills.skill_files_inline(tenant, exported["skills"])
    return exported


# -- plan: compile and diff ----------------------------------------------------------------
@dataclass(frozen=True)
class ObjectChange:
    section: str  # policy | connections | tools | agents | crews
    name: str
    action: str  # create | update | delete
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # field -> {from, to}
    note: str = ""  # what else applying it does (a new webhook's secret is made)

    def as_dict(self) -> dict[str, Any]:
        shown = {
            "section": self.section,
            "name": self.name,
            "action": self.action,
            "fields": self.fields,
        }
        return {**shown, "note": self.note} if self.note else shown


@dataclass
class ConfigPlan:
    """What applying a document would do (`changes`), or why it cannot (`problems`)."""

    changes: list[ObjectChange] = field(default_factory=list)
    problems: list[ConfigProblem] = field(default_factory=list)
    applied: bool = False
    compiled: CompiledConfig | None = None
    prune: bool = False
    new_secrets: list[NewSecret] = field(default_factory=list)  # made by applying: once
    # Where `tools` entries made by `tool_imports` were written (their problems' paths).
    imported: ImportedTools = field(default_factory=ImportedTools, repr=False)

    @property
    def valid(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "applied": self.applied,
            "prune": self.prune,
            "changes": [change.as_dict() for change in self.changes],
            "problems": [problem.as_dict() for problem in self.problems],
            "new_secrets": [secret.as_dict() for secret in self.new_secrets],
        }


def _field_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: {"from": before.get(name), "to": value}
        for name, value in after.items()
        if before.get(name) != value
    }


def known_names(tenant: Tenant, current: TenantEntries, prune: bool) -> KnownNames:
    """What a document may refer to besides its own objects: the tenant's tools from other
    sources (built-ins, MCP connections, an agent's own: `agent_tool_names`), its groups,
    and — unless pruned — its objects of the sections the document leaves alone."""
    definitions = set(current.objects["tools"])
    other_tools = tool_names_besides_definitions(tenant.pk) - definitions | agent_tool_names()
    kept = (lambda section: frozenset()) if prune else (lambda s: frozenset(current.objects[s]))
    keys = ApiKey.objects.filter(tenant=tenant).values("name").annotate(n=Count("id"))
    return KnownNames(
        tools=frozenset(other_tools) | kept("tools"),
        definitions=kept("tools"),
        connections=kept("connections"),
        agents=kept("agents"),
        crews=kept("crews"),
        workflows=kept("workflows"),
        groups=frozenset(TenantGroup.objects.filter(tenant=tenant).values_list("name", flat=True)),
        datasets=frozenset(Dataset.objects.filter(tenant=tenant).values_list("name", flat=True)),
        agent_kinds=frozenset(KINDS),
        remote_commands=frozenset(settings.REMOTE_AGENT_COMMANDS),
        members=frozenset(_members(tenant)),
        api_keys=frozenset(k["name"] for k in keys if k["n"] == 1),
        shared_api_keys=frozenset(k["name"] for k in keys if k["n"] > 1),
        trigger_min_interval_s=settings.TRIGGER_MIN_INTERVAL_S,
        skill_pins=frozenset(skills.skill_pin_choices(tenant)),
    )


def _members(tenant: Tenant) -> dict[str, Any]:
    """The tenant's members by username (how a document names them). One query."""
    users = get_user_model().objects.filter(memberships__tenant=tenant)
    return {user.get_username(): user for user in users}


def _secret_problems(compiled: CompiledConfig, current: TenantEntries) -> list[ConfigProblem]:
    problems = []
    for section in SECRET_PREFIX:
        for index, entry in enumerate(getattr(compiled.document, section)):
            name = getattr(entry, KEYS[section])
            if entry.secret is None:
                continue
            path, own = f"{section}[{index}].secret", secret_name(section, name)
            stored = current.entries[section].get(name, {}).get("secret")
            if entry.secret != own:
                problems.append(
                    ConfigProblem(path, f"secrets are named after their object: write {own!r}")
                )
            elif stored != own:
                problems.append(
                    ConfigProblem(
                        path,
                        f"this tenant holds no secret {own!r}: enter it on the object's page "
                        "or REST resource (the value never goes in a document), then import "
                        "again",
                    )
                )
    return problems


def _policy_problems(compiled: CompiledConfig, current: TenantEntries, prune: bool) -> list:
    """The policy covers the tools the document leaves in place too."""
    if prune or not compiled.document.policy.require_confirmation_for_writes:
        return []
    named = {tool.name for tool in compiled.document.tools}
    breaking = sorted(
        name
        for name, tool in current.objects["tools"].items()
        if name not in named
        and not tool.requires_approval
        and effective_effect(tool.kind, tool.config, tool.effect) in WRITE_EFFECTS
    )
    if not breaking:
        return []
    return [
        ConfigProblem(
            "policy.require_confirmation_for_writes",
            "these tools, which the document leaves in place, write without confirmation: "
            + ", ".join(breaking),
        )
    ]


def _kept_graph_problems(compiled: CompiledConfig, current: TenantEntries, prune: bool) -> list:
    """Dependencies of the tools the document leaves in place that its tools would break."""
    named = {tool.name for tool in compiled.document.tools}
    kept = {
        name: definition_shape(row)
        for name, row in current.objects["tools"].items()
        if name not in named and not prune
    }
    if not any(shape.depends_on for shape in kept.values()):
        return []
    shapes = dict(kept)
    for tool in compiled.document.tools:
        contract = compiled.tools[tool.name]
        shapes[tool.name] = ToolShape(
            kind=tool.kind,
            # The full schema: the model's contract lacks the inputs dependencies fill.
            input_schema=tool.input_schema if tool.kind == "http" else contract.model.input_schema,
            output_schema=contract.execution.output_schema,
            depends_on=tool.depends_on,
        )
    return [
        ConfigProblem(
            "tools",
            f"tool {problem.tool!r}, which the document leaves in place, {problem.where}: "
            f"{problem.reason}",
        )
        for problem in dependency_problems(shapes)
        if problem.tool in kept
    ]


def config_plan(
    *, tenant: Tenant, text: str | bytes, format: Format | None = None, prune: bool = False
) -> ConfigPlan:
    """What importing `text` into `tenant` would change; nothing is written. Problems (an
    unreadable or invalid document) come back in the plan, not as an exception."""
    plan = ConfigPlan(prune=prune)
    try:
        data = load_document(text, format=format)
    except DocumentUnreadable as exc:
        plan.problems = [ConfigProblem("", str(exc))]
        return plan
    data, plan.imported, plan.problems = tool_imports_expanded(
        data, secret_of=partial(secret_name, "tools")
    )
    if plan.problems:
        return plan
    current = tenant_entries(tenant)
    try:
        compiled = compile_config(data, known=known_names(tenant, current, prune))
    except ConfigInvalid as exc:
        plan.problems = [plan.imported.relocated(problem) for problem in exc.problems]
        return plan
    desired = compiled.document.as_data()
    plan.problems = [
        *_secret_problems(compiled, current),
        *_policy_problems(compiled, current, prune),
        *_kept_graph_problems(compiled, current, prune),
        *(
            problem
            for section in SECTIONS
            if (check := _REGISTERED[section].check) is not None and desired[section]
            for problem in check(tenant, desired[section])
        ),
    ]
    plan.problems = [plan.imported.relocated(problem) for problem in plan.problems]
    if plan.problems:
        return plan
    plan.compiled = compiled
    policy = _field_changes(policy_entry(tenant), desired["policy"])
    if policy:
        plan.changes.append(ObjectChange("policy", "policy", "update", policy))
    for name, setting in _SETTINGS.items():
        if desired.get(name) is not None and (
            changed := _field_changes(setting.read(tenant), desired[name])
        ):
            plan.changes.append(ObjectChange(name, name, "update", changed))
    for section in SECTIONS:
        before = current.entries[section]
        named = set()
        compared = _REGISTERED[section].compared or (lambda entry: entry)
        for entry in map(compared, desired[section]):
            name = entry_name(section, entry)
            named.add(name)
            if name not in before:
                changed = {key: {"to": value} for key, value in entry.items()}
                noting = _REGISTERED[section].create_note
                note = noting(entry) if noting is not None else ""
                plan.changes.append(ObjectChange(section, name, "create", changed, note))
            elif changed := _field_changes(before[name], entry):
                plan.changes.append(ObjectChange(section, name, "update", changed))
        if prune and _REGISTERED[section].pruned:
            for name in before:
                if name not in named:
                    plan.changes.append(ObjectChange(section, name, "delete"))
    return plan


# -- apply ---------------------------------------------------------------------------------
class _DryRunDone(Exception):
    """Ends a dry run's transaction once everything is applied: all of it rolls back."""


def config_import(
    *,
    tenant: Tenant,
    text: str | bytes,
    format: Format | None = None,
    prune: bool = False,
    dry_run: bool = False,
    by: Principal | None = None,
) -> ConfigPlan:
    """Plan, then (unless the plan has problems) apply the plan's changes in one
    transaction. A model rule or service refusing a change rolls everything back and comes
    back as a problem at the document path it concerns. `by`: who imports (REST's and the
    page's principal; None: the platform's operator, as the command acts, with an owner's
    role).

    A dry run is the import, rolled back: the same saves through the same services, every
    model's full_clean and every service's rule (a secret whose destination moves among
    them), then the transaction is undone. So it refuses exactly what the import refuses,
    at the same paths. It leaves no trace: its rows, audit entries and configuration
    versions roll back, the tasks its changes queue after commit are never sent, its
    Redis version bumps stay its own (`versions.held`), a new webhook's secret is never
    shown (only the ids its rows took are not given out again). It costs what the import
    costs."""
    plan = config_plan(tenant=tenant, text=text, format=format, prune=prune)
    if not plan.valid or not plan.changes:
        return plan
    by = by if by is not None else Principal(tenant=tenant, role=Role.OWNER)
    drafted: set[tuple[str, str]] = set()
    try:
        with transaction.atomic(), versions.held():
            new_secrets = _apply(tenant, plan, by, drafted)
            if dry_run:
                raise _DryRunDone
    except ConfigInvalid as exc:
        plan.problems = [plan.imported.relocated(problem) for problem in exc.problems]
    except _DryRunDone:
        pass
    else:
        plan.new_secrets, plan.applied = new_secrets, True
    if drafted and not plan.problems:  # a required evaluation's gate (agents.publishing)
        plan.changes = [
            replace(change, note=DRAFTED) if (change.section, change.name) in drafted else change
            for change in plan.changes
        ]
    if not plan.applied:  # its settings as stored: the policy's services set them on it
        tenant.refresh_from_db()
    return plan


DRAFTED = (
    "saved as a draft: its required evaluation runs on it, and it goes live only "
    "when it passes (docs/evaluations.md)"
)


def _apply(
    tenant: Tenant, plan: ConfigPlan, by: Principal, drafted: set[tuple[str, str]]
) -> list[NewSecret]:
    """Apply the plan; `drafted` gets the (section, name) of each change saved as a draft."""
    assert plan.compiled is not None
    document = plan.compiled.document
    current = tenant_entries(tenant)
    changing = {(c.section, c.name): c.action for c in plan.changes}
    desired = document.as_data()
    positions = {
        section: {entry_name(section, entry): i for i, entry in enumerate(desired[section])}
        for section in SECTIONS
    }

    def save(section: str, name: str, call: Callable[[], Any]) -> Any:
        index = positions[section].get(name)
        path = section if index is None else f"{section}[{index}]"
        try:
            return call()
        except ValidationError as exc:
            raise ConfigInvalid(_model_problems(exc, path, FIELD_PATHS[section])) from None
        except (SaveConflict, PermissionDenied) as exc:  # e.g. a publish gate weakened
            raise ConfigInvalid([ConfigProblem(path, str(exc))]) from None

    if ("policy", "policy") in changing:
        policy = document.policy
        try:
            if policy.require_confirmation_for_writes != tenant.require_confirmation_for_writes:
                tenant_policy_set(
                    tenant=tenant,
                    require_confirmation_for_writes=policy.require_confirmation_for_writes,
                )
            if policy.time_zone != tenant.time_zone:
                tenant_time_zone_set(tenant=tenant, time_zone=policy.time_zone)
        except ValidationError as exc:
            raise ConfigInvalid([ConfigProblem("policy", m) for m in exc.messages]) from None
    for name, setting in _SETTINGS.items():
        if (name, name) in changing:
            stored = setting.read(tenant)
            wanted = {k: v for k, v in desired[name].items() if stored.get(k) != v}
            actor = by.user or by.api_key
            try:
                setting.write(tenant=tenant, changes=wanted, actor=actor)
            except ValidationError as exc:
                raise ConfigInvalid(_model_problems(exc, name, {})) from None
    # Deletions first, dependents before what they use, so names freed can be taken again.
    for section in reversed(SECTIONS):
        delete = _REGISTERED[section].delete_object
        for name, obj in current.objects[section].items():
            if changing.get((section, name)) == "delete":
                save(section, name, lambda obj=obj, delete=delete: delete(tenant, obj, by))

    keys = list(ApiKey.objects.filter(tenant=tenant))
    names = [key.name for key in keys]
    refs = Refs(
        connections=dict(current.objects["connections"]),
        agents=dict(current.objects["agents"]),
        groups={g.name: g for g in TenantGroup.objects.filter(tenant=tenant)},
        datasets={d.name: d for d in Dataset.objects.filter(tenant=tenant)},
        crews=dict(current.objects["crews"]),
        workflows=dict(current.objects["workflows"]),
        members=_members(tenant),
        api_keys={key.name: key for key in keys if names.count(key.name) == 1},
        by=by,
    )
    saved_into = {
        "connections": refs.connections,
        "agents": refs.agents,
        "crews": refs.crews,
        "workflows": refs.workflows,  # (a trigger may name a workflow saved before it)
    }
    new_secrets = []
    for section in SECTIONS:  # in order: an object after those it refers to
        saver = _REGISTERED[section].save_object
        shown_once = _REGISTERED[section].shown_once
        for entry in desired[section]:
            name = entry_name(section, entry)
            if (action := changing.get((section, name))) is None:
                continue
            existing = current.objects[section].get(name) if action == "update" else None
            changes = _model_changes(section, entry, refs)
            saved = save(
                section,
                name,
                lambda o=existing, c=changes, e=entry, f=saver: f(tenant, o, c, e, refs),
            )
            if getattr(saved, "pending_draft", None) is not None:
                drafted.add((section, name))
            if section in saved_into:
                saved_into[section][name] = saved
            if shown_once is not None and (secret := shown_once(saved, name)) is not None:
                new_secrets.append(secret)
    return new_secrets


def _model_problems(exc: ValidationError, path: str, fields: dict[str, str]) -> list:
    if not hasattr(exc, "error_dict"):
        return [ConfigProblem(path, message) for message in exc.messages]
    problems = []
    for name, errors in exc.error_dict.items():
        where = path if name == NON_FIELD_ERRORS else f"{path}.{fields.get(name, name)}"
        for error in errors:
            problems.extend(ConfigProblem(where, message) for message in error.messages)
    return problems
