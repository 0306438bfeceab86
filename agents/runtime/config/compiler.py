"""Configuration document -> CompiledConfig, checking the whole graph.

`compile_config(data, known=...)` migrates older versions, validates the structure (unknown
fields included) and then the graph: names, references between objects, tool dependencies,
schemas, credentials and the tenant's policy. Every problem found is reported, each with
the document path it concerns (`tools[3].config.url`) and the reason; structural problems
are reported alone, since the graph cannot be read without a valid structure.

Each tool compiles to two contracts: the `ModelContract` (what the model is shown: name,
description, input schema without the inputs the runtime fills) and the
`ExecutionContract` (how the platform calls it), so execution data never reaches a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import urlsplit

import pydantic

from agents.runtime.config.document import ConfigDocument, ToolEntry, price_name, quota_name
from agents.runtime.config.migrations import UnsupportedVersion, migrate
from agents.runtime.config.skill_entries import approved_pins
from agents.runtime.declared_workflows.compiler import (
    ToolSchemas,
    WorkflowInvalid,
    compile_definition,
)
from agents.runtime.quota_rules import quota_problems
from agents.runtime.spec import AgentSpec
from agents.runtime.triggers import trigger_problems
from providers.runtime.presets import PRESETS
from providers.runtime.price_rules import PRICE_KINDS, is_price_kind, model_refusal, price_refusal
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import ConfigurationError
from tools.runtime.credential_leaks import credential_like, url_credential_problem
from tools.runtime.definitions import (
    WRITE_EFFECTS,
    WRITE_NEEDS_CONFIRMATION,
    BuiltinConfig,
    Dependency,
    default_capability,
    effective_effect,
    tool_name_refusal,
)
from tools.runtime.dependencies import ToolShape, dependency_problems
from tools.runtime.http_tool import HttpToolConfig
from tools.runtime.tool import Effect, model_input_schema
from tools.runtime.validation import SchemaError, check_schema


@dataclass(frozen=True)
class ConfigProblem:
    path: str  # where in the document: "tools[3].config.url"; "" for the whole document
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


class ConfigInvalid(ConfigurationError):
    """The document cannot be applied; `problems` lists every reason found."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        first = problems[0] if problems else ConfigProblem("", "invalid")
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{first.path or 'document'}: {first.reason}{more}")


@dataclass(frozen=True)
class KnownNames:
    """What exists outside the document and stays (the import passes the tenant's objects
    it keeps): references to these are valid. `agent_kinds` None: kinds are not checked."""

    tools: frozenset[str] = frozenset()
    definitions: frozenset[str] = frozenset()  # of `tools`, the tenant's kept definitions
    connections: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    crews: frozenset[str] = frozenset()
    workflows: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    datasets: frozenset[str] | None = None  # an agent's required evaluation; None: unchecked
    agent_kinds: frozenset[str] | None = None
    remote_commands: frozenset[str] | None = None  # the operator's allow-list; None: unchecked
    # The tenant's members (usernames) and API keys (names held by one key; those several
    # keys share cannot be referred to): None, unchecked.
    members: frozenset[str] | None = None
    api_keys: frozenset[str] | None = None
    shared_api_keys: frozenset[str] = frozenset()
    trigger_min_interval_s: int = 60  # the operator's TRIGGER_MIN_INTERVAL_S
    # What an agent may pin: `name@latest` and `name@N` of each approved skill version (skills
    # are installed as packages, never by the document); None: unchecked.
    skill_pins: frozenset[str] | None = None


@dataclass(frozen=True)
class ModelContract:
    """What a model is shown of a tool; nothing about how or where it runs."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class AuthReference:
    type: str  # bearer | header | basic
    secret: str  # the secret's name, never its value
    header: str = ""
    username: str = ""


@dataclass(frozen=True)
class ExecutionContract:
    """How the platform executes a tool; never shown to a model."""

    name: str
    kind: str  # http | builtin
    effect: Effect
    idempotent: bool
    confirmation_required: bool
    timeout_s: float
    rate_limit_per_minute: int | None
    output_schema: dict[str, Any] | None  # results are checked against it
    dependencies: dict[str, Dependency] = field(default_factory=dict)
    builtin: str | None = None
    method: str | None = None
    url: str | None = None
    auth: AuthReference | None = None
    arguments: tuple[dict[str, Any], ...] = ()  # model arguments -> path/query/header/body
    context: tuple[dict[str, Any], ...] = ()  # server values -> path/query/header/body
    fixed: dict[str, Any] = field(default_factory=dict)
    retry: dict[str, Any] | None = None
    model_view: dict[str, str] | None = None
    references: dict[str, str] = field(default_factory=dict)  # result paths shown as tokens


@dataclass(frozen=True)
class CompiledTool:
    model: ModelContract
    execution: ExecutionContract


@dataclass(frozen=True)
class CompiledConfig:
    document: ConfigDocument
    tools: dict[str, CompiledTool]


def compile_config(data: Any, *, known: KnownNames = KnownNames()) -> CompiledConfig:
    """The compiled configuration of `data` (a loaded document of any supported version),
    or ConfigInvalid listing every problem."""
    if not isinstance(data, dict):
        raise ConfigInvalid([ConfigProblem("", "the document must be a mapping (an object)")])
    try:
        data = migrate(data)
    except UnsupportedVersion as exc:
        raise ConfigInvalid([ConfigProblem("version", str(exc))]) from None
    try:
        document = ConfigDocument.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigInvalid(_structure_problems(exc)) from None
    checker = _Checker(document, known)
    tools = checker.run()
    if checker.problems:
        raise ConfigInvalid(checker.problems)
    return CompiledConfig(document=document, tools=tools)


def _path(location: Iterable[Any], prefix: str = "") -> str:
    path = prefix
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _structure_problems(exc: pydantic.ValidationError, prefix: str = "") -> list[ConfigProblem]:
    problems = []
    for error in exc.errors():
        reason = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            reason = "unknown field"
        problems.append(ConfigProblem(_path(error["loc"], prefix), reason))
    return problems


@lru_cache(maxsize=4096)
def _schema_verdict(what: str, schema_json: str) -> str | None:
    """Why a JSON Schema (as canonical JSON text) is refused, or None: a pure function of
    the text, kept for the process (a check costs milliseconds)."""
    try:
        check_schema(json.loads(schema_json), what=what)
    except SchemaError as exc:
        return str(exc)
    return None


@lru_cache(maxsize=1024)
def _trigger_verdict(
    name: str, kind: str, cron: str, timezone: str, template: str, min_interval_s: int, hour: str
) -> tuple[tuple[str, str], ...]:
    """`trigger_problems` of these values, kept for the process within the hour (`hour`):
    every save of a configuration object compiles the tenant's triggers, and reading a
    schedule's next fires costs about 2 ms."""
    refused = trigger_problems(
        name=name, kind=kind, cron=cron, timezone=timezone, input_template=template,
        min_interval_s=min_interval_s, now=datetime.now(UTC),
    )  # fmt: skip
    return tuple(refused.items())


class _Checker:
    """The graph checks of one valid-structure document; problems accumulate."""

    def __init__(self, document: ConfigDocument, known: KnownNames) -> None:
        self.document = document
        self.known = known
        self.problems: list[ConfigProblem] = []
        self.tool_index: dict[str, int] = {}  # name -> its first entry
        for index, tool in enumerate(document.tools):
            self.tool_index.setdefault(tool.name, index)
        self.input_schemas: dict[str, dict[str, Any]] = {}
        self.output_schemas: dict[str, dict[str, Any] | None] = {}

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(ConfigProblem(path, reason))

    def run(self) -> dict[str, CompiledTool]:
        self.check_connections()
        self.check_model_aliases()
        compiled = {}
        for index, tool in enumerate(self.document.tools):
            built = self.check_tool(index, tool)
            if built is not None:
                compiled[tool.name] = built
        self.check_dependencies()
        self.check_references(compiled)
        self.duplicates("skills", "name", [skill.name for skill in self.document.skills])
        self.check_agents()
        self.check_crews()
        self.check_workflows()
        self.check_mcp_servers()
        self.check_knowledge_bases()
        self.check_prices()
        self.check_quotas()
        self.check_triggers()
        if self.problems:
            return {}
        return {name: self.contracts(name, *built) for name, built in compiled.items()}

    def duplicates(self, section: str, key: str, names: list[str]) -> None:
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in seen:
                where = f"{section}[{index}]" + (f".{key}" if key else "")
                self.problem(where, f"{name!r} appears twice in {section}")
            seen.add(name)

    def schema(self, path: str, schema: Any, what: str) -> bool:
        # Documents repeat schemas (the same output shape on many tools), and every save of
        # one object compiles its tenant's whole document again: check each schema once.
        reason = _schema_verdict(what, json.dumps(schema, sort_keys=True))
        if reason is not None:
            self.problem(path, reason)
        return reason is None

    # -- connections ------------------------------------------------------------------
    def check_connections(self) -> None:
        connections = self.document.connections
        self.duplicates("connections", "name", [c.name for c in connections])
        defaults = [i for i, c in enumerate(connections) if c.default]
        for index in defaults[1:]:
            self.problem(f"connections[{index}].default", "only one connection may be the default")
        for index, connection in enumerate(connections):
            path = f"connections[{index}]"
            if connection.kind == "openai_compatible":
                if connection.preset not in PRESETS or connection.preset == "openai":
                    choices = ", ".join(sorted(p for p in PRESETS if p != "openai"))
                    self.problem(f"{path}.preset", f"choose the service: one of {choices}")
            elif connection.preset:
                self.problem(f"{path}.preset", "presets are for openai_compatible connections")
            if connection.base_url:
                self.check_url(f"{path}.base_url", connection.base_url)
            for name in connection.extra_headers:
                if credential_like(name):
                    self.problem(
                        f"{path}.extra_headers.{name}",
                        "a credential does not go in a header here: use the secret",
                    )
            allowed = connection.allowed_models
            if allowed and connection.default_model and connection.default_model not in allowed:
                self.problem(f"{path}.default_model", "must be one of allowed_models")

    def check_url(self, path: str, url: str) -> None:
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:  # e.g. an unclosed "[" of an IPv6 address
            host = None
        if host is None or parts.scheme not in ("http", "https"):
            self.problem(path, "give an http:// or https:// URL with a host")
            return
        reason = url_credential_problem(url)
        if reason is not None:
            self.problem(path, reason)

    # -- tools ------------------------------------------------------------------------
    def check_tool(
        self, index: int, tool: ToolEntry
    ) -> tuple[ToolEntry, HttpToolConfig | BuiltinConfig] | None:
        path = f"tools[{index}]"
        if index != self.tool_index[tool.name]:
            self.problem(f"{path}.name", f"{tool.name!r} appears twice in tools")
        refused = tool_name_refusal(tool.name, tool.kind, tool.config)
        if refused is not None:
            self.problem(f"{path}.name", refused)
        config = self.tool_config(path, tool)
        if tool.output_schema is not None:
            self.schema(f"{path}.output_schema", tool.output_schema, "output_schema")
        if isinstance(config, BuiltinConfig):
            base = BUILTINS.get(config.builtin)
            if tool.input_schema:
                self.problem(f"{path}.input_schema", "a built-in's input schema is its own")
            self.input_schemas[tool.name] = base.input_schema
            self.output_schemas[tool.name] = tool.output_schema or base.output_schema
        else:
            if not tool.description.strip():
                self.problem(f"{path}.description", "describe the tool for the model")
            valid = self.schema(f"{path}.input_schema", tool.input_schema, "input_schema")
            self.input_schemas[tool.name] = tool.input_schema if valid else {}
            self.output_schemas[tool.name] = tool.output_schema
            if isinstance(config, HttpToolConfig):
                self.check_http(path, tool, config, valid)
        writes = effective_effect(tool.kind, tool.config, tool.effect) in WRITE_EFFECTS
        required = self.document.policy.require_confirmation_for_writes
        if required and writes and not tool.confirmation.required:
            self.problem(f"{path}.confirmation", WRITE_NEEDS_CONFIRMATION)
        return None if config is None else (tool, config)

    def tool_config(self, path: str, tool: ToolEntry) -> HttpToolConfig | BuiltinConfig | None:
        model = BuiltinConfig if tool.kind == "builtin" else HttpToolConfig
        try:
            return model.model_validate(tool.config)
        except pydantic.ValidationError as exc:
            self.problems.extend(_structure_problems(exc, f"{path}.config"))
            return None

    def check_http(self, path: str, tool: ToolEntry, config: HttpToolConfig, valid: bool) -> None:
        reason = url_credential_problem(config.url)
        if reason is not None:
            self.problem(f"{path}.config.url", reason)
        for name in config.fixed.query:
            if credential_like(name):
                self.problem(
                    f"{path}.config.fixed.query.{name}",
                    "looks like a credential: use config.auth with a secret",
                )
        for name in config.fixed.headers:
            if credential_like(name):
                self.problem(
                    f"{path}.config.fixed.headers.{name}",
                    "looks like a credential: use config.auth with a secret",
                )
        if valid:
            try:
                config.check_against_schema(tool.input_schema)
            except ValueError as exc:
                self.problem(f"{path}.config", str(exc))
        if config.auth is not None and not tool.secret:
            self.problem(f"{path}.secret", f"{config.auth.type} auth needs a secret: name it")
        if config.auth is None and tool.secret:
            self.problem(
                f"{path}.secret",
                "a secret without config.auth is never sent: add auth, or remove it",
            )

    # -- dependencies -----------------------------------------------------------------
    def check_dependencies(self) -> None:
        shapes = {}
        for tool in self.document.tools:  # the first of duplicates: reported already
            if tool.name not in shapes:
                shapes[tool.name] = ToolShape(
                    kind=tool.kind,
                    input_schema=self.input_schemas.get(tool.name) or {},
                    output_schema=self.output_schemas.get(tool.name),
                    depends_on=tool.depends_on,
                )
        for problem in dependency_problems(shapes):
            self.problem(f"tools[{self.tool_index[problem.tool]}].{problem.where}", problem.reason)

    def check_references(self, compiled: dict[str, tuple[ToolEntry, Any]]) -> None:
        """An argument taking a reference kind needs a tool whose result gives that kind
        (config.references), else no token of it can exist. Kept tools outside the document
        (definitions; built-ins give none) may give it: then it is not checked."""
        configs = {n: c for n, (_, c) in compiled.items() if isinstance(c, HttpToolConfig)}
        given = {kind for c in configs.values() for kind in c.references.values()}
        if self.known.definitions - set(self.tool_index):
            return
        for name, config in configs.items():
            for position, target in enumerate(config.arguments):
                if target.reference is not None and target.reference not in given:
                    self.problem(
                        f"tools[{self.tool_index[name]}].config.arguments[{position}].reference",
                        f"no tool's result gives {target.reference} references "
                        "(config.references of a tool)",
                    )

    # -- agents and crews -------------------------------------------------------------
    @cached_property
    def document_pins(self) -> frozenset[str]:
        """What the document's own skills section makes pinnable (its approved versions)."""
        return approved_pins(self.document.skills)

    def check_skills(self, path: str, pins: list[str]) -> None:
        seen: set[str] = set()
        for position, pin in enumerate(pins):
            name = pin.partition("@")[0]
            if name in seen:
                self.problem(f"{path}.skills[{position}]", f"skill {name!r} is named twice")
            seen.add(name)
            known = self.known.skill_pins
            if known is not None and pin not in known | self.document_pins:
                self.problem(
                    f"{path}.skills[{position}]",
                    f"no installed, approved skill version {pin!r} (install and approve it first)",
                )

    def check_agents(self) -> None:
        agents = self.document.agents
        self.duplicates("agents", "slug", [a.slug for a in agents])
        connections = {c.name: c for c in self.document.connections}
        tools = set(self.tool_index) | set(BUILTINS.names()) | self.known.tools
        for index, agent in enumerate(agents):
            path = f"agents[{index}]"
            if agent.connection is not None:
                if agent.connection not in connections and agent.connection not in (
                    self.known.connections
                ):
                    self.problem(f"{path}.connection", f"unknown connection {agent.connection!r}")
                connection = connections.get(agent.connection)
                limited = connection is not None and connection.allowed_models
                if limited and agent.model and agent.model not in connection.allowed_models:
                    self.problem(f"{path}.model", "the connection does not allow this model")
            self.check_fallbacks(path, agent, connections)
            self.check_compaction(path, agent.compaction, agent.connection, connections)
            for key in ("names", "exclude"):
                for position, name in enumerate(getattr(agent.tools, key)):
                    if name not in tools:
                        self.problem(f"{path}.tools.{key}[{position}]", f"unknown tool {name!r}")
            self.check_skills(path, agent.skills)
            approval = agent.approval
            if approval.deciders == "group" and not approval.group:
                self.problem(f"{path}.approval.group", "name the group whose members decide")
            if approval.group and approval.group not in self.known.groups:
                self.problem(f"{path}.approval.group", f"unknown group {approval.group!r}")
            gate, datasets = agent.publish.evaluation, self.known.datasets
            if gate and datasets is not None and gate not in datasets:
                self.problem(f"{path}.publish.evaluation", f"unknown dataset {gate!r}")
            if agent.output_schema is not None:
                self.schema(f"{path}.output_schema", agent.output_schema, "output_schema")
            kinds = self.known.agent_kinds
            if kinds is not None and agent.kind not in kinds:
                self.problem(f"{path}.kind", f"choose one of: {', '.join(sorted(kinds))}")
            if agent.kind == "remote" and bool(agent.remote_url) == bool(agent.remote_command):
                self.problem(
                    f"{path}.remote_url",
                    "a remote agent needs its server's URL or a command, not both",
                )
            commands = self.known.remote_commands
            if (
                agent.remote_command
                and commands is not None
                and agent.remote_command not in commands
            ):
                allowed = ", ".join(sorted(commands)) or "none are configured"
                self.problem(
                    f"{path}.remote_command",
                    f"choose a command the operator allow-lists ({allowed})",
                )
            if agent.remote_url:
                self.check_url(f"{path}.remote_url", agent.remote_url)

    def check_compaction(
        self, path: str, compaction: Any, own: str | None, connections: dict[str, Any]
    ) -> None:
        """The summarising connection exists, and allows the summarising model (`own`'s, the
        agent's connection, when it names none; a crew has none)."""
        name = compaction.connection
        if name is not None and name not in connections and name not in self.known.connections:
            self.problem(f"{path}.compaction.connection", f"unknown connection {name!r}")
            return
        connection = connections.get(name if name is not None else own)
        model = compaction.model
        allowed = connection.allowed_models if connection is not None else None
        if model and allowed and model not in allowed:
            self.problem(f"{path}.compaction.model", "the connection does not allow this model")

    def check_model_aliases(self) -> None:
        aliases = self.document.model_aliases
        self.duplicates("model_aliases", "name", [a.name for a in aliases])
        connections = {c.name: c for c in self.document.connections}
        for index, alias in enumerate(aliases):
            path = f"model_aliases[{index}]"
            self.check_pairs(path, "targets", alias.targets, connections)
            kinds = {
                connections[t.connection].kind for t in alias.targets if t.connection in connections
            }
            if "offline" in kinds:
                self.problem(f"{path}.targets", "the offline demo has no model to call")
            if "anthropic" in kinds and kinds & {"openai", "openai_compatible"}:
                self.problem(
                    f"{path}.targets",
                    "Anthropic and OpenAI(-compatible) connections cannot be mixed: a gateway "
                    "call is passed through in its own API",
                )

    def check_fallbacks(self, path: str, agent: Any, connections: dict[str, Any]) -> None:
        self.check_pairs(path, "fallbacks", agent.fallbacks, connections)
        if agent.kind == "remote" and agent.fallbacks:
            self.problem(f"{path}.fallbacks", "a remote agent calls no model: no fallbacks")

    def check_pairs(
        self, path: str, key: str, pairs: list[Any], connections: dict[str, Any]
    ) -> None:
        """Each pair names a connection that exists, a model it allows (or has a default
        of), and is not listed twice."""
        seen: set[tuple[str, str]] = set()
        for position, fallback in enumerate(pairs):
            where = f"{path}.{key}[{position}]"
            name = fallback.connection
            if name not in connections and name not in self.known.connections:
                self.problem(f"{where}.connection", f"unknown connection {name!r}")
                continue
            connection = connections.get(name)
            if connection is not None:
                if not fallback.model and not connection.default_model:
                    self.problem(f"{where}.model", "name the model: the connection has no default")
                allowed = connection.allowed_models
                if fallback.model and allowed and fallback.model not in allowed:
                    self.problem(f"{where}.model", "the connection does not allow this model")
            if (name, fallback.model) in seen:
                self.problem(where, "this connection and model are listed twice")
            seen.add((name, fallback.model))

    def check_crews(self) -> None:
        crews = self.document.crews
        self.duplicates("crews", "slug", [c.slug for c in crews])
        agents = {a.slug for a in self.document.agents} | self.known.agents
        connections = {c.name: c for c in self.document.connections}
        for index, crew in enumerate(crews):
            path = f"crews[{index}]"
            seen: set[str] = set()
            for position, slug in enumerate(crew.members):
                if slug not in agents:
                    self.problem(f"{path}.members[{position}]", f"unknown agent {slug!r}")
                elif slug in seen:
                    self.problem(f"{path}.members[{position}]", f"{slug!r} is a member twice")
                seen.add(slug)
            if crew.manager is not None and crew.manager not in agents:
                self.problem(f"{path}.manager", f"unknown agent {crew.manager!r}")
            if crew.mode == "hierarchical" and crew.manager is None:
                self.problem(f"{path}.manager", "a hierarchical crew needs a manager agent")
            gate, datasets = crew.publish.evaluation, self.known.datasets
            if gate and datasets is not None and gate not in datasets:
                self.problem(f"{path}.publish.evaluation", f"unknown dataset {gate!r}")
            self.check_compaction(path, crew.compaction, None, connections)

    # -- workflows -------------------------------------------------------------------
    def check_workflows(self) -> None:
        """Each workflow compiled with the document's tools and agents (their schemas known),
        the built-ins (theirs too) and the tenant's others (known by name only: their types
        are not checked here; a save of the workflow itself checks them, agents/workflows)."""
        workflows = self.document.workflows
        self.duplicates("workflows", "slug", [w.slug for w in workflows])
        if not workflows:
            return
        tools: dict[str, ToolSchemas] = {name: ToolSchemas() for name in self.known.tools}
        for name in self.known.tools - self.known.definitions:
            if BUILTINS.has(name):  # a built-in's schemas are the same for every tenant
                builtin = BUILTINS.get(name)
                tools[name] = ToolSchemas(builtin.input_schema, builtin.output_schema)
        for name, schema in self.input_schemas.items():
            tools[name] = ToolSchemas(schema, self.output_schemas.get(name))
        agents: dict[str, AgentSpec | None] = dict.fromkeys(self.known.agents)
        for agent in self.document.agents:
            agents[agent.slug] = AgentSpec(
                name=agent.slug, instructions="", model="", output_schema=agent.output_schema
            )
        for index, workflow in enumerate(workflows):
            try:
                compile_definition(workflow.definition, tools=tools, agents=agents)
            except WorkflowInvalid as exc:
                path = f"workflows[{index}].definition"
                for problem in exc.problems:
                    self.problem(f"{path}.{problem.path}" if problem.path else path, problem.reason)

    # -- MCP servers and knowledge bases ----------------------------------------------
    def check_mcp_servers(self) -> None:
        servers = self.document.mcp_servers
        self.duplicates("mcp_servers", "name", [s.name for s in servers])
        prefixes = [(i, s.tool_prefix) for i, s in enumerate(servers) if s.tool_prefix]
        self.duplicates("mcp_servers", "tool_prefix", [p for _, p in prefixes])
        for index, server in enumerate(servers):
            path = f"mcp_servers[{index}]"
            self.check_url(f"{path}.url", server.url)
            for position, name in enumerate(server.allowed_tool_names):
                if not name.strip():
                    self.problem(f"{path}.allowed_tool_names[{position}]", "name a remote tool")

    def check_knowledge_bases(self) -> None:
        bases = self.document.knowledge_bases
        self.duplicates("knowledge_bases", "slug", [b.slug for b in bases])
        connections = {c.name: c for c in self.document.connections}
        agents = {a.slug for a in self.document.agents} | self.known.agents
        for index, base in enumerate(bases):
            path = f"knowledge_bases[{index}]"
            if base.embedder == "provider":
                if base.connection is None:
                    self.problem(f"{path}.connection", "provider embeddings need a connection")
                elif base.connection not in connections and (
                    base.connection not in self.known.connections
                ):
                    self.problem(f"{path}.connection", f"unknown connection {base.connection!r}")
                elif (kind := getattr(connections.get(base.connection), "kind", None)) in (
                    "anthropic",
                    "offline",
                ):
                    self.problem(
                        f"{path}.connection",
                        f"embeddings come from openai or openai_compatible connections, not {kind}",
                    )
                if not base.embedding_model:
                    self.problem(f"{path}.embedding_model", "name the embedding model")
            else:
                for key in ("connection", "embedding_model", "dimensions"):
                    if getattr(base, key):
                        self.problem(f"{path}.{key}", "only provider embeddings take this")
            if base.chunk_overlap >= base.chunk_size:
                self.problem(f"{path}.chunk_overlap", "must be smaller than chunk_size")
            seen: set[str] = set()
            for position, slug in enumerate(base.agents):
                if slug not in agents:
                    self.problem(f"{path}.agents[{position}]", f"unknown agent {slug!r}")
                elif slug in seen:
                    self.problem(f"{path}.agents[{position}]", f"{slug!r} appears twice")
                seen.add(slug)

    # -- prices, quotas and triggers: their own rules are the models' (one home each) ---
    def check_prices(self) -> None:
        prices = self.document.prices
        self.duplicates("prices", "model", [price_name(p.model_dump()) for p in prices])
        for index, price in enumerate(prices):
            path = f"prices[{index}]"
            if not is_price_kind(price.provider):
                kinds = ", ".join(name for name, _ in PRICE_KINDS)
                self.problem(f"{path}.provider", f"unknown price table: one of {kinds}")
            if refusal := model_refusal(price.model):
                self.problem(f"{path}.model", refusal)
            for key in ("input", "output", "cached_input", "cache_write"):
                if refusal := price_refusal(getattr(price, key)):
                    self.problem(f"{path}.{key}", refusal)

    def check_quotas(self) -> None:
        quotas = self.document.quotas
        self.duplicates("quotas", "", [quota_name(q.model_dump()) for q in quotas])
        agents = {a.slug for a in self.document.agents} | self.known.agents
        for index, quota in enumerate(quotas):
            path = f"quotas[{index}]"
            given = {"user": quota.member is not None, "api_key": quota.api_key is not None}
            given["agent"] = quota.agent is not None
            refused = quota_problems(
                scope=quota.scope, given=given, metric=quota.metric, limit=quota.limit
            )
            for name, reason in refused.items():
                self.problem(f"{path}.{'member' if name == 'user' else name}", reason)
            if quota.agent is not None and "agent" not in refused and quota.agent not in agents:
                self.problem(f"{path}.agent", f"unknown agent {quota.agent!r}")
            if quota.member is not None and "user" not in refused:
                self.check_member(f"{path}.member", quota.member)
            key = quota.api_key
            if key is not None and "api_key" not in refused and self.known.api_keys is not None:
                if key in self.known.shared_api_keys:
                    self.problem(
                        f"{path}.api_key",
                        f"several API keys are named {key!r}: rename all but one to name it",
                    )
                elif key not in self.known.api_keys:
                    self.problem(f"{path}.api_key", f"unknown API key {key!r}")

    def check_member(self, path: str, username: str) -> None:
        if self.known.members is not None and username not in self.known.members:
            self.problem(path, f"no member of this tenant has the username {username!r}")

    def check_triggers(self) -> None:
        triggers = self.document.triggers
        self.duplicates("triggers", "name", [t.name for t in triggers])
        agents = {a.slug for a in self.document.agents} | self.known.agents
        crews = {c.slug for c in self.document.crews} | self.known.crews
        workflows = {w.slug for w in self.document.workflows} | self.known.workflows
        hour = datetime.now(UTC).strftime("%Y%m%d%H")
        for index, trigger in enumerate(triggers):
            path = f"triggers[{index}]"
            refused = _trigger_verdict(
                trigger.name, trigger.kind, trigger.cron, trigger.timezone,
                trigger.input_template, self.known.trigger_min_interval_s, hour,
            )  # fmt: skip
            for name, reason in refused:
                self.problem(f"{path}.{name}", reason)
            named = [t for t in (trigger.agent, trigger.crew, trigger.workflow) if t is not None]
            if len(named) != 1:
                self.problem(f"{path}.agent", "Choose one agent, one crew or one workflow.")
            elif trigger.agent is not None and trigger.agent not in agents:
                self.problem(f"{path}.agent", f"unknown agent {trigger.agent!r}")
            elif trigger.crew is not None and trigger.crew not in crews:
                self.problem(f"{path}.crew", f"unknown crew {trigger.crew!r}")
            elif trigger.workflow is not None and trigger.workflow not in workflows:
                self.problem(f"{path}.workflow", f"unknown workflow {trigger.workflow!r}")
            if trigger.run_as is None:
                self.problem(f"{path}.run_as", "Name the member the runs are attributed to.")
            else:
                self.check_member(f"{path}.run_as", trigger.run_as)

    # -- the two contracts ------------------------------------------------------------
    def contracts(
        self, name: str, tool: ToolEntry, config: HttpToolConfig | BuiltinConfig
    ) -> CompiledTool:
        effect, idempotent = default_capability(tool.kind, tool.config)
        input_schema = self.input_schemas[name]
        references = {}
        if isinstance(config, HttpToolConfig):
            references = {t.argument: t.reference for t in config.arguments if t.reference}
        # The runtime fills depends_on inputs: the model neither sees nor sets them.
        model_schema = model_input_schema(input_schema, tool.depends_on, references)
        description = tool.description
        if isinstance(config, BuiltinConfig):
            description = description or BUILTINS.get(config.builtin).description
        execution = ExecutionContract(
            name=name,
            kind=tool.kind,
            effect=Effect(tool.effect) if tool.effect else effect,
            idempotent=idempotent if tool.idempotent is None else tool.idempotent,
            confirmation_required=tool.confirmation.required,
            timeout_s=tool.timeout_s,
            rate_limit_per_minute=tool.rate_limit_per_minute,
            output_schema=self.output_schemas.get(name),
            dependencies=dict(tool.depends_on),
        )
        if isinstance(config, BuiltinConfig):
            execution = replace(execution, builtin=config.builtin)
        else:
            auth = config.auth
            execution = replace(
                execution,
                method=config.method,
                url=config.url,
                auth=None
                if auth is None
                else AuthReference(auth.type, tool.secret or "", auth.header, auth.username),
                arguments=tuple(t.model_dump(exclude_none=True) for t in config.arguments),
                context=tuple(t.model_dump() for t in config.context),
                fixed=config.fixed.model_dump(),
                retry=config.retry.model_dump(),
                model_view=config.model_view,
                references=dict(config.references),
            )
        return CompiledTool(ModelContract(name, description, model_schema), execution)
