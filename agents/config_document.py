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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from agentplatform.saving import SaveConflict
from agentplatform.tenancy.models import Tenant, TenantGroup
from agentplatform.tenancy.services import tenant_policy_set
from agents.models import Agent, Crew
from agents.runtime.config.compiler import (
    CompiledConfig,
    ConfigInvalid,
    ConfigProblem,
    KnownNames,
    compile_config,
)
from agents.runtime.config.document import VERSION
from agents.runtime.config.loading import DocumentUnreadable, Format, load_document
from agents.runtime.kinds import KINDS
from agents.services import agent_delete, agent_save, crew_delete, crew_save
from providers.models import ProviderConnection
from providers.services import connection_delete, connection_save
from tools.definitions import definition_shape
from tools.loader import tenant_tools
from tools.models import ToolDefinition
from tools.runtime.credential_leaks import redacted_url, redacted_values
from tools.runtime.definitions import WRITE_EFFECTS, effective_effect
from tools.runtime.dependencies import ToolShape, dependency_problems
from tools.services import tool_definition_delete, tool_definition_save

SECTIONS = ("connections", "tools", "agents", "crews")  # in the order they are written
KEYS = {"connections": "name", "tools": "name", "agents": "slug", "crews": "slug"}
SECRET_PREFIX = {"connections": "connection", "tools": "tool", "agents": "agent"}


def secret_name(section: str, name: str) -> str:
    """The name a document gives the stored secret of an object (`tool:crm`)."""
    return f"{SECRET_PREFIX[section]}:{name}"


# -- export --------------------------------------------------------------------------------
def _connection_entry(connection: ProviderConnection) -> dict[str, Any]:
    return {
        "name": connection.name,
        "kind": connection.kind,
        "preset": connection.preset,
        "base_url": redacted_url(connection.base_url),
        "secret": secret_name("connections", connection.name) if connection.api_key else None,
        "extra_headers": redacted_values(connection.extra_headers),
        "default_model": connection.default_model,
        "allowed_models": list(connection.allowed_models),
        "timeout_s": connection.timeout_s,
        "max_retries": connection.max_retries,
        "default": connection.is_default,
    }


def _tool_entry(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool.name,
        "kind": tool.kind,
        "description": tool.description,
        # A built-in alias runs with the built-in's schema; whatever the row holds is unused.
        "input_schema": {} if tool.kind == "builtin" else tool.input_schema,
        "output_schema": tool.output_schema,
        "config": _tool_config_shown(tool.config),
        "secret": secret_name("tools", tool.name) if tool.secret else None,
        "tags": list(tool.tags),
        "effect": tool.effect or None,
        "idempotent": tool.idempotent,
        "confirmation": {"required": tool.requires_approval},
        "timeout_s": tool.timeout_s,
        "rate_limit_per_minute": tool.rate_limit_per_minute,
        "enabled": tool.enabled,
        "depends_on": tool.depends_on or {},
    }


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


def _agent_entry(agent: Agent) -> dict[str, Any]:
    connection, group = agent.provider_connection, agent.approval_group
    return {
        "slug": agent.slug,
        "name": agent.name,
        "description": agent.description,
        "instructions": agent.instructions,
        "connection": connection.name if connection is not None else None,
        "model": agent.model,
        "temperature": agent.temperature,
        "max_rounds": agent.max_rounds,
        "max_tool_calls": agent.max_tool_calls,
        "max_tokens_per_run": agent.max_tokens_per_run,
        "tools": {
            "all": agent.use_all_tools,
            "names": list(agent.tool_names),
            "tags": list(agent.tool_tags),
            "exclude": list(agent.tool_exclude),
        },
        "approval": {
            "policy": agent.approval_policy,
            "deciders": agent.approval_deciders,
            "group": group.name if group is not None else None,
            "not_starter": agent.approval_not_starter,
        },
        "memory": agent.memory,
        "results_without_tools": agent.results_without_tools,
        "output_schema": agent.output_schema,
        "kind": agent.kind,
        "remote_url": redacted_url(agent.remote_url),
        "secret": secret_name("agents", agent.slug) if agent.remote_token else None,
        "active": agent.active,
    }


def _crew_entry(crew: Crew) -> dict[str, Any]:
    return {
        "slug": crew.slug,
        "name": crew.name,
        "description": crew.description,
        "mode": crew.mode,
        "members": [member.agent.slug for member in crew.members.all()],
        "manager": crew.manager.slug if crew.manager is not None else None,
        "max_delegations": crew.max_delegations,
        "max_depth": crew.max_depth,
        "token_budget": crew.token_budget,
        "active": crew.active,
    }


@dataclass
class _Current:
    """The tenant's objects, by section and name, with their document entries."""

    objects: dict[str, dict[str, Any]]
    entries: dict[str, dict[str, dict[str, Any]]]


def _current(tenant: Tenant) -> _Current:
    """Five queries (plus one per crew for its members' slugs, prefetched)."""
    rows: dict[str, list[Any]] = {
        "connections": list(ProviderConnection.objects.filter(tenant=tenant).order_by("name")),
        "tools": list(ToolDefinition.objects.filter(tenant=tenant).order_by("name")),
        "agents": list(
            Agent.objects.filter(tenant=tenant)
            .select_related("provider_connection", "approval_group")
            .order_by("slug")
        ),
        "crews": list(
            Crew.objects.filter(tenant=tenant)
            .select_related("manager")
            .prefetch_related("members__agent")
            .order_by("slug")
        ),
    }
    makers: dict[str, Callable[[Any], dict[str, Any]]] = {
        "connections": _connection_entry,
        "tools": _tool_entry,
        "agents": _agent_entry,
        "crews": _crew_entry,
    }
    objects: dict[str, dict[str, Any]] = {}
    entries: dict[str, dict[str, dict[str, Any]]] = {}
    for section, items in rows.items():
        key = KEYS[section]
        objects[section] = {getattr(item, key): item for item in items}
        entries[section] = {getattr(item, key): makers[section](item) for item in items}
    return _Current(objects, entries)


def _policy_entry(tenant: Tenant) -> dict[str, Any]:
    return {"require_confirmation_for_writes": tenant.require_confirmation_for_writes}


def config_export(*, tenant: Tenant) -> dict[str, Any]:
    """The tenant's configuration as document data (version 1): its provider connections,
    tool definitions, agents and crews, secrets by name only."""
    current = _current(tenant)
    return {
        "version": VERSION,
        "policy": _policy_entry(tenant),
        **{section: list(current.entries[section].values()) for section in SECTIONS},
    }


# -- plan: compile and diff ----------------------------------------------------------------
@dataclass(frozen=True)
class ObjectChange:
    section: str  # policy | connections | tools | agents | crews
    name: str
    action: str  # create | update | delete
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # field -> {from, to}

    def as_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "action": self.action,
            "fields": self.fields,
        }


@dataclass
class ConfigPlan:
    """What applying a document would do (`changes`), or why it cannot (`problems`)."""

    changes: list[ObjectChange] = field(default_factory=list)
    problems: list[ConfigProblem] = field(default_factory=list)
    applied: bool = False
    compiled: CompiledConfig | None = None
    prune: bool = False

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
        }


def _field_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: {"from": before.get(name), "to": value}
        for name, value in after.items()
        if before.get(name) != value
    }


def _known_names(tenant: Tenant, current: _Current, prune: bool) -> KnownNames:
    """What a document may refer to besides its own objects: the tenant's tools from other
    sources (built-ins, MCP connections), its groups, and — unless pruned — its objects of
    the sections the document leaves alone."""
    definitions = set(current.objects["tools"])
    other_tools = set(tenant_tools(tenant).registry.names()) - definitions
    kept = (lambda section: frozenset()) if prune else (lambda s: frozenset(current.objects[s]))
    return KnownNames(
        tools=frozenset(other_tools) | kept("tools"),
        connections=kept("connections"),
        agents=kept("agents"),
        groups=frozenset(TenantGroup.objects.filter(tenant=tenant).values_list("name", flat=True)),
        agent_kinds=frozenset(KINDS),
    )


def _secret_problems(compiled: CompiledConfig, current: _Current) -> list[ConfigProblem]:
    problems = []
    for section in ("connections", "tools", "agents"):
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


def _policy_problems(compiled: CompiledConfig, current: _Current, prune: bool) -> list:
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


def _kept_graph_problems(compiled: CompiledConfig, current: _Current, prune: bool) -> list:
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
    current = _current(tenant)
    try:
        compiled = compile_config(data, known=_known_names(tenant, current, prune))
    except ConfigInvalid as exc:
        plan.problems = exc.problems
        return plan
    plan.problems = [
        *_secret_problems(compiled, current),
        *_policy_problems(compiled, current, prune),
        *_kept_graph_problems(compiled, current, prune),
    ]
    if plan.problems:
        return plan
    plan.compiled = compiled
    desired = compiled.document.as_data()
    policy = _field_changes(_policy_entry(tenant), desired["policy"])
    if policy:
        plan.changes.append(ObjectChange("policy", "policy", "update", policy))
    for section in SECTIONS:
        before = current.entries[section]
        named = set()
        for entry in desired[section]:
            name = entry[KEYS[section]]
            named.add(name)
            if name not in before:
                changed = {key: {"to": value} for key, value in entry.items()}
                plan.changes.append(ObjectChange(section, name, "create", changed))
            elif changed := _field_changes(before[name], entry):
                plan.changes.append(ObjectChange(section, name, "update", changed))
        if prune:
            for name in before:
                if name not in named:
                    plan.changes.append(ObjectChange(section, name, "delete"))
    return plan


# -- apply ---------------------------------------------------------------------------------
def config_import(
    *,
    tenant: Tenant,
    text: str | bytes,
    format: Format | None = None,
    prune: bool = False,
    dry_run: bool = False,
) -> ConfigPlan:
    """Plan, then (unless `dry_run` or the plan has problems) apply the plan's changes in one
    transaction. A model rule refusing a change rolls everything back and comes back as a
    problem at the document path it concerns."""
    plan = config_plan(tenant=tenant, text=text, format=format, prune=prune)
    if dry_run or not plan.valid or not plan.changes:
        return plan
    try:
        with transaction.atomic():
            _apply(tenant, plan)
    except ConfigInvalid as exc:
        plan.problems = exc.problems
        return plan
    plan.applied = True
    return plan


def _apply(tenant: Tenant, plan: ConfigPlan) -> None:
    assert plan.compiled is not None
    document = plan.compiled.document
    current = _current(tenant)
    changing = {(c.section, c.name): c.action for c in plan.changes}
    positions = {
        section: {getattr(entry, KEYS[section]): i for i, entry in enumerate(entries)}
        for section in SECTIONS
        for entries in [getattr(document, section)]
    }

    def save(section: str, name: str, call: Callable[[], Any]) -> Any:
        index = positions[section].get(name)
        path = section if index is None else f"{section}[{index}]"
        try:
            return call()
        except ValidationError as exc:
            raise ConfigInvalid(_model_problems(exc, path, FIELD_PATHS[section])) from None
        except SaveConflict as exc:
            raise ConfigInvalid([ConfigProblem(path, str(exc))]) from None

    if ("policy", "policy") in changing:
        required = document.policy.require_confirmation_for_writes
        try:
            tenant_policy_set(tenant=tenant, require_confirmation_for_writes=required)
        except ValidationError as exc:
            raise ConfigInvalid([ConfigProblem("policy", m) for m in exc.messages]) from None
    # Deletions first, dependents before what they use, so names freed can be taken again.
    for section, delete in (
        ("crews", lambda obj: crew_delete(tenant=tenant, crew=obj)),
        ("agents", lambda obj: agent_delete(tenant=tenant, agent=obj)),
        (
            "tools",
            lambda obj: tool_definition_delete(tenant=tenant, definition=obj, graph_checked=True),
        ),
        ("connections", lambda obj: connection_delete(tenant=tenant, connection=obj)),
    ):
        for name, obj in current.objects[section].items():
            if changing.get((section, name)) == "delete":
                save(section, name, lambda obj=obj, delete=delete: delete(obj))

    connections = dict(current.objects["connections"])
    for entry in document.connections:
        if (action := changing.get(("connections", entry.name))) is None:
            continue
        existing = connections.get(entry.name) if action == "update" else None
        changes = {
            "name": entry.name,
            "kind": entry.kind,
            "preset": entry.preset,
            "base_url": entry.base_url,
            "extra_headers": entry.extra_headers,
            "default_model": entry.default_model,
            "allowed_models": entry.allowed_models,
            "timeout_s": entry.timeout_s,
            "max_retries": entry.max_retries,
            "is_default": entry.default,
        }
        if entry.secret is None:
            changes["api_key"] = None
        connections[entry.name] = save(
            "connections",
            entry.name,
            lambda e=existing, c=changes: connection_save(tenant=tenant, connection=e, changes=c),
        )

    for entry in document.tools:
        if (action := changing.get(("tools", entry.name))) is None:
            continue
        existing = current.objects["tools"].get(entry.name) if action == "update" else None
        changes = {
            "name": entry.name,
            "kind": entry.kind,
            "description": entry.description,
            "input_schema": entry.input_schema,
            "output_schema": entry.output_schema,
            "config": entry.config,
            "tags": entry.tags,
            "effect": entry.effect or "",
            "idempotent": entry.idempotent,
            "requires_approval": entry.confirmation.required,
            "timeout_s": entry.timeout_s,
            "rate_limit_per_minute": entry.rate_limit_per_minute,
            "enabled": entry.enabled,
            "depends_on": {k: v.model_dump(by_alias=True) for k, v in entry.depends_on.items()},
        }
        if entry.secret is None:
            changes["secret"] = None
        save(
            "tools",
            entry.name,
            lambda e=existing, c=changes: tool_definition_save(
                tenant=tenant, definition=e, changes=c, graph_checked=True
            ),
        )

    agents = dict(current.objects["agents"])
    groups = {g.name: g for g in TenantGroup.objects.filter(tenant=tenant)}
    for entry in document.agents:
        if (action := changing.get(("agents", entry.slug))) is None:
            continue
        existing = agents.get(entry.slug) if action == "update" else None
        changes = {
            "slug": entry.slug,
            "name": entry.name,
            "description": entry.description,
            "instructions": entry.instructions,
            "provider_connection": connections.get(entry.connection) if entry.connection else None,
            "model": entry.model,
            "temperature": entry.temperature,
            "max_rounds": entry.max_rounds,
            "max_tool_calls": entry.max_tool_calls,
            "max_tokens_per_run": entry.max_tokens_per_run,
            "use_all_tools": entry.tools.all,
            "tool_names": entry.tools.names,
            "tool_tags": entry.tools.tags,
            "tool_exclude": entry.tools.exclude,
            "approval_policy": entry.approval.policy,
            "approval_deciders": entry.approval.deciders,
            "approval_group": groups.get(entry.approval.group) if entry.approval.group else None,
            "approval_not_starter": entry.approval.not_starter,
            "memory": entry.memory,
            "results_without_tools": entry.results_without_tools,
            "output_schema": entry.output_schema,
            "kind": entry.kind,
            "remote_url": entry.remote_url,
            "active": entry.active,
        }
        if entry.secret is None:
            changes["remote_token"] = None
        agents[entry.slug] = save(
            "agents",
            entry.slug,
            lambda e=existing, c=changes: agent_save(tenant=tenant, agent=e, changes=c),
        )

    for entry in document.crews:
        if (action := changing.get(("crews", entry.slug))) is None:
            continue
        existing = current.objects["crews"].get(entry.slug) if action == "update" else None
        changes = {
            "slug": entry.slug,
            "name": entry.name,
            "description": entry.description,
            "mode": entry.mode,
            "manager": agents.get(entry.manager) if entry.manager else None,
            "max_delegations": entry.max_delegations,
            "max_depth": entry.max_depth,
            "token_budget": entry.token_budget,
            "active": entry.active,
        }
        members = [agents[slug] for slug in entry.members]
        save(
            "crews",
            entry.slug,
            lambda e=existing, c=changes, m=members: crew_save(
                tenant=tenant, crew=e, changes=c, members=m
            ),
        )


# Model field -> where it is in a document entry, for the model's own errors.
FIELD_PATHS: dict[str, dict[str, str]] = {
    "connections": {"api_key": "secret", "is_default": "default"},
    "tools": {"requires_approval": "confirmation.required"},
    "agents": {
        "provider_connection": "connection",
        "remote_token": "secret",
        "use_all_tools": "tools.all",
        "tool_names": "tools.names",
        "tool_tags": "tools.tags",
        "tool_exclude": "tools.exclude",
        "approval_policy": "approval.policy",
        "approval_deciders": "approval.deciders",
        "approval_group": "approval.group",
        "approval_not_starter": "approval.not_starter",
    },
    "crews": {},
}


def _model_problems(exc: ValidationError, path: str, fields: dict[str, str]) -> list:
    if not hasattr(exc, "error_dict"):
        return [ConfigProblem(path, message) for message in exc.messages]
    problems = []
    for name, errors in exc.error_dict.items():
        where = path if name == NON_FIELD_ERRORS else f"{path}.{fields.get(name, name)}"
        for error in errors:
            problems.extend(ConfigProblem(where, message) for message in error.messages)
    return problems
