"""Agent rows -> runtime AgentSpecs."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from django.conf import settings

from agents.models import Agent, Crew
from agents.runtime.spec import AgentSpec, CodeLimits
from base.versions import config_version
from providers.models import ProviderConnection
from tenancy.records import history
from tools.models import ToolDefinition


def agent_spec(agent: Agent, connection: ProviderConnection | None) -> AgentSpec:
    return AgentSpec(
        name=agent.slug,
        instructions=agent.instructions,
        model=agent.model or (connection.default_model if connection else "") or "default",
        temperature=agent.temperature,
        max_rounds=agent.max_rounds,
        max_tool_calls=agent.max_tool_calls,
        max_tokens_per_run=agent.max_tokens_per_run,
        tool_names=None if agent.use_all_tools else tuple(agent.tool_names),
        tool_tags=() if agent.use_all_tools else tuple(agent.tool_tags),
        tool_exclude=tuple(agent.tool_exclude),
        approval_policy=agent.approval_policy,  # type: ignore[arg-type]
        memory=agent.memory,
        results_without_tools=agent.results_without_tools,
        code_mode=agent.code_mode,
        code_limits=code_limits(),
        output_schema=agent.output_schema,
        kind=agent.kind,
        remote_url=agent.remote_url,
        remote_command_name=agent.remote_command,
        remote_command=remote_command_argv(agent.remote_command),
        remote_command_user=settings.REMOTE_AGENT_COMMAND_USER,
    )


def code_limits() -> CodeLimits:
    """A code-mode program's limits, from the settings (CODE_MODE_*)."""
    return CodeLimits(
        time_s=settings.CODE_MODE_TIME_S,
        memory_bytes=settings.CODE_MODE_MEMORY_MB * 1024 * 1024,
        output_chars=settings.CODE_MODE_OUTPUT_CHARS,
        tool_calls=settings.CODE_MODE_TOOL_CALLS,
    )


def run_config_versions(
    tenant_id: int,
    *,
    agent: Agent | None = None,
    crew: Crew | None = None,
    connection: ProviderConnection | None = None,
    tool_names: Sequence[str] = (),
) -> dict[str, list[list[int]]]:
    """What a run records as the configuration it used: the latest version of its agent or
    crew, the agent's connection and its tool definitions among `tool_names`, as
    `{label: [[id, number], ...]}` (docs/config-history.md). Two queries, or none while
    the tenant's configuration is unchanged since this process last read the same (kept per
    process: they were two of a run's dozen statements before its first model call)."""
    key = (
        tenant_id,
        agent.pk if agent is not None else None,
        crew.pk if crew is not None else None,
        connection.pk if connection is not None else None,
        tuple(sorted(tool_names)),
    )
    # (the tools' version too: a definition deleted records no version)
    version = (history.numbers_version(tenant_id), config_version(tenant_id))
    kept = _numbers.get(key)
    if kept is not None and kept[0] == version:
        return copy.deepcopy(kept[1])
    found = _config_versions(tenant_id, agent, crew, connection, tool_names)
    if len(_numbers) >= _NUMBERS_KEPT:
        _numbers.clear()
    _numbers[key] = (version, found)
    return copy.deepcopy(found)


_NUMBERS_KEPT = 1000
_numbers: dict[tuple, tuple[tuple[str, str], dict[str, list[list[int]]]]] = {}


def _config_versions(tenant_id, agent, crew, connection, tool_names):
    wanted: dict[str, list[int]] = {}
    if agent is not None:
        wanted["agents.agent"] = [agent.pk]
    if crew is not None:
        wanted["agents.crew"] = [crew.pk]
    if connection is not None and connection.pk:
        wanted["providers.providerconnection"] = [connection.pk]
    if tool_names:
        definitions = ToolDefinition.objects.filter(tenant_id=tenant_id, name__in=tool_names)
        wanted["tools.tooldefinition"] = list(definitions.values_list("pk", flat=True))
    return history.latest_numbers(tenant_id, wanted)


def remote_command_argv(name: str) -> tuple[str, ...]:
    """The argv the operator allow-lists under `name` (REMOTE_AGENT_COMMANDS); () if none."""
    argv = settings.REMOTE_AGENT_COMMANDS.get(name) if name else None
    return tuple(argv) if argv else ()
