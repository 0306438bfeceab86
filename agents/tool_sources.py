"""Which tools an agent's runs get: `effective_tools(agent)`, the one answer the engine, the
admin, the web config pages and REST read.

Besides the tenant's registry (built-ins, its tool definitions, its MCP servers' tools), an
agent gets tools bound to it, contributed by plug-ins (memory: remember/recall/forget when
the agent remembers; rag: `knowledge_search` over the agent's knowledge bases, and
`file_read` of their documents): each is an `agentplatform.tool_sources` entry point,
loaded at startup. A source's tools are offered whatever the agent's tool picks are
(turning memory on, linking a knowledge base is the pick), unless the agent excludes them
by name. A source whose tools need the run's user (memory: a person's facts) offers
nothing to a run without one (an API key's that acts for no member), unless it says it
serves such a key's run for this agent (`key_runs`: memory, when the agent keeps memory for
keys, scoped to the key). The loop then adds
the synthetic `final_answer` (when it has an output schema). The agent's kind may change
what its loop gets (a simple agent gets none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from django.core.exceptions import ValidationError

from agents.models import Agent
from agents.runtime.kinds import spec_for_kind
from agents.runtime.loop import agent_registry
from agents.runtime.spec import AgentSpec
from agents.runtime.structured import FINAL_ANSWER
from agents.specs import agent_spec
from tools.context_providers import (
    Health,
    OfferedToolRef,
    ProviderEntry,
    ProviderHealth,
    context_providers_for,
    validate_domains,
)
from tools.loader import TenantTools, tenant_tools
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Tool

ToolSource = Callable[[Agent], Tool | Iterable[Tool] | None]  # the agent -> its tools
_sources: list[tuple[ToolSource, str]] = []
_source_domains: dict[str, tuple[str, ...]] = {}  # label -> the capability domains it covers
_source_names: set[str] = set()
_sources_needing_a_user: dict[int, Callable[[Agent], bool] | None] = {}  # id -> key_runs
STRUCTURED_OUTPUT = "structured output"


def add_tool_source(
    source: ToolSource,
    *,
    label: str,
    domains: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
    needs_user: bool = False,
    key_runs: Callable[[Agent], bool] | None = None,
) -> None:
    """Offer `source(agent)`'s tool to the agent's runs; `label` names where it comes from
    (shown beside the tool: "knowledge"); `domains`, from `tools.context_providers.Domain`,
    what it covers (a ValueError names any other); `names` the names its tools may have (an
    agent's configuration may name them: `agent_tool_names`); `needs_user`: its tools work
    only for a run with a user, and runs without one are not offered them — but a key's
    run acting for no member is, when `key_runs(agent)` says so. A source whose
    providers have a lister of their own (rag's knowledge bases) is described by that lister
    instead. The loader calls it for each `agentplatform.tool_sources` plug-in
    (base/plugins.py, agents/apps.py), with the plug-in's `label`, `domains`,
    `tool_names`, `needs_user` and `key_runs` attributes."""
    try:
        validate_domains(list(domains))
    except ValidationError as refused:
        raise ValueError(" ".join(refused.messages)) from None
    if all(known is not source for known, _ in _sources):
        _sources.append((source, label))
        _source_domains[label] = tuple(domains)
        _source_names.update(names)
        if needs_user:
            _sources_needing_a_user[id(source)] = key_runs


def agent_tool_names() -> frozenset[str]:
    """Tool names an agent may pick or exclude besides its tenant's registry: the registered
    sources' tools and the structured output's."""
    return frozenset({*_source_names, FINAL_ANSWER})


@dataclass(frozen=True)
class OfferedTool:
    tool: Tool
    source: str  # built-in, tenant definition, MCP server, knowledge, memory, structured output

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def capability(self) -> Capability:
        return self.tool.capability


@dataclass(frozen=True)
class EffectiveTools:
    spec: AgentSpec  # the agent's spec, its own tools picked too
    registry: ToolRegistry  # the tenant's tools and the agent's own: what the loop picks from
    offered: ToolRegistry  # what the model of a run is offered, in this order
    sources: dict[str, str]  # offered tool name -> where it comes from
    unknown: tuple[str, ...]  # configured names that match no tool (ignored)

    def __iter__(self) -> Iterator[OfferedTool]:
        return (OfferedTool(item, self.sources[item.name]) for item in self.offered)

    def __len__(self) -> int:
        return len(self.offered)


def effective_tools(
    agent: Agent,
    *,
    spec: AgentSpec | None = None,
    toolbox: TenantTools | None = None,
    with_user: bool = True,
    with_key: bool = False,
) -> EffectiveTools:
    """The tools a run of `agent` is offered, each with its source. `spec` defaults to the
    agent's own (the engine passes the one it runs), `toolbox` to the tenant's tools (one
    cache read when fresh); `with_user`: whether the run has a user (the engine says; the
    agent's own listings show what a member's run gets); `with_key`: whether a run without
    one was started by an API key. Each registered source may read
    too (rag: its links, once per configuration version). An unsaved agent has no tools of
    its own."""
    spec = spec or agent_spec(agent, None)
    toolbox = toolbox or tenant_tools(agent.tenant_id)
    own = [
        (tool, label)
        for source, label in _sources
        if with_user or _offered_without_user(source, agent, with_key)
        for tool in _tools(source(agent))
    ]
    registry = toolbox.registry
    if own:
        registry = ToolRegistry(list(registry))
        for tool, _ in own:
            registry.register(tool, replace=True)
        if spec.tool_names is not None:  # picked by name or tag: pick these too
            spec = replace(spec, tool_names=(*spec.tool_names, *(t.name for t, _ in own)))
    runs_with = spec_for_kind(spec)
    offered = agent_registry(runs_with, registry)
    labels = {**toolbox.sources, **{tool.name: label for tool, label in own}}
    sources = {}
    for name in offered.names():
        if runs_with.output_schema is not None and name == FINAL_ANSWER:
            sources[name] = STRUCTURED_OUTPUT
        else:
            sources[name] = labels.get(name, "")
    named = [*(spec.tool_names or ()), *spec.tool_exclude]
    unknown = tuple(
        sorted({name for name in named if not registry.has(name) and not offered.has(name)})
    )
    return EffectiveTools(
        spec=spec, registry=registry, offered=offered, sources=sources, unknown=unknown
    )


def _offered_without_user(source: ToolSource, agent: Agent, with_key: bool) -> bool:
    if id(source) not in _sources_needing_a_user:
        return True
    key_runs = _sources_needing_a_user[id(source)]
    return with_key and key_runs is not None and key_runs(agent)


def _tools(given: Tool | Iterable[Tool] | None) -> list[Tool]:
    if given is None:
        return []
    return [given] if isinstance(given, Tool) else list(given)


def agent_context_providers(
    agent: Agent, offered: Iterable[OfferedTool] | None = None
) -> list[ProviderEntry]:
    """The context providers behind the agent's tools (`offered`, default its effective
    tools): the MCP connections whose tools it gets, the knowledge bases it searches, ...
    each with its domains and health (docs/context-providers.md). A query per kind."""
    offered = list(offered) if offered is not None else list(effective_tools(agent))
    refs = [OfferedToolRef(item.name, item.source, frozenset(item.tool.tags)) for item in offered]
    entries = context_providers_for(agent.tenant_id, agent.pk, refs)
    described = {name for entry in entries for name in entry.tools}
    for label, domains in _source_domains.items():  # registered sources no lister described
        tools = [i.name for i in offered if i.source == label and i.name not in described]
        if tools:
            entries.append(
                ProviderEntry(
                    kind="tool_source",
                    label="Tool source",
                    id=None,
                    name=label,
                    domains=list(domains),
                    health=ProviderHealth(Health.UNKNOWN.value, "", None),
                    tools=tools,
                )
            )
    return entries
