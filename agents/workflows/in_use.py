"""What the tenant's workflows name may not be deleted from under them: a tool definition
or an agent a saved workflow's steps name is refused, with the workflows that name it
(`base.config_checks` asks this before every deletion, whatever the face). A rename is
refused already: every save compiles the whole configuration, the workflows with it."""

from __future__ import annotations

from typing import Any

from agents.models import Agent, WorkflowDefinition
from agents.runtime.declared_workflows.compiler import definition_references
from tools.models import ToolDefinition
from tools.runtime.builtins import BUILTINS


def workflows_naming(*, tenant_id: int, tool: str = "", agent: str = "") -> list[str]:
    """The slugs of the tenant's workflows whose steps name `tool` or `agent`. One query."""
    stored = WorkflowDefinition.objects.filter(tenant_id=tenant_id).values_list(
        "slug", "definition"
    )
    found = []
    for slug, definition in stored:
        references = definition_references(definition)
        if (tool and tool in references.tools) or (agent and agent in references.agents):
            found.append(slug)
    return sorted(found)


def refusals_to_delete(instance: Any) -> list[str]:
    """Why `instance` (a tool definition, an agent) may not be deleted: the workflows using
    it. A delete check (`base.config_checks.register_delete_check`)."""
    if isinstance(instance, ToolDefinition):
        if BUILTINS.has(instance.name):  # a built-in it replaced comes back in its place
            return []
        noun, named = "tool", {"tool": instance.name}
    elif isinstance(instance, Agent):
        noun, named = "agent", {"agent": instance.slug}
    else:
        return []
    if instance.tenant_id is None or instance.pk is None:
        return []
    slugs = workflows_naming(tenant_id=instance.tenant_id, **named)
    if not slugs:
        return []
    listed = ", ".join(f"“{slug}”" for slug in slugs)
    which = f"Workflow {listed} uses" if len(slugs) == 1 else f"Workflows {listed} use"
    return [f"{which} this {noun}: change or delete {'it' if len(slugs) == 1 else 'them'} first."]
