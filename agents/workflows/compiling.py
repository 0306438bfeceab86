"""A tenant's workflow compiled: its document with what the compiler needs to know of the
tenant — the tools of its registry (their schemas) and the agents the document names (their
specs). Asked when a workflow is saved (every problem, at its path) and when one runs."""

from __future__ import annotations

from typing import Any

from agents.runtime.declared_workflows.compiler import (
    CompiledWorkflow,
    compile_definition,
    definition_references,
)
from agents.specs import agent_spec
from agents.workflows.selectors import workflow_agents
from providers.services import default_connection
from tenancy.models import Tenant
from tools.loader import registry_for_tenant
from tools.runtime.registry import ToolRegistry


def workflow_compile(
    *,
    tenant: Tenant,
    definition: Any,
    label: str = "workflow",
    registry: ToolRegistry | None = None,
) -> CompiledWorkflow:
    """`definition` compiled against the tenant's tools (`registry`, default the tenant's
    whole registry: one cache read when fresh) and its agents (one query, for the slugs the
    document names); WorkflowInvalid lists every problem at its path."""
    tools = registry if registry is not None else registry_for_tenant(tenant)
    named = definition_references(definition).agents
    agents = {  # each as its runs run it: its connection, else the tenant's default
        agent.slug: agent_spec(agent, agent.provider_connection or default_connection(tenant))
        for agent in workflow_agents(tenant=tenant, slugs=named)
    }
    signatures = {name: tools.get(name) for name in tools.names()}
    return compile_definition(definition, tools=signatures, agents=agents, label=label)
