"""Workflows exposed as tools: each enabled workflow of a tenant with `expose_as_tool` is the
tool `workflow_<slug>` in the tenant's registry (a tenant tool source, tools/tool_sources.py),
so its agents may pick it and MCP clients call it (/mcp lists the tenant's registry). Its
input schema is the workflow's; a call runs the workflow as a run of its own and returns
its output (a failed run: the tool's error, naming the step).

Called in a run (an agent's), the workflow's run is that run's child for the call
(`Run.parent`, `child_key` = the call id): a call made again after a crash finds the same
child run, finished or resumed from its records, so the tool is idempotent even when the
workflow writes. Called directly (MCP, REST), it is a run of its own, started by the
calling user or key. Either way the starter's access is checked as for any start
(agents.access.may_start_workflow; in a run, the use of the workflow's agents).

Its capability declares a write (the strongest a workflow may do: approval policies that
ask before writes ask before it); its steps may then call tools that read or write, not
tools flagged as needing approval (agents/runtime/workflow.py, `steps_approval`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pydantic
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agents import runs
from agents.models import Run, WorkflowDefinition
from agents.workflows import WorkflowDocument
from base.versions import config_changed
from tenancy.models import ApiKey
from tools.runtime.context import RunContext
from tools.runtime.egress import EgressPolicy
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed
from tools.tool_sources import TenantToolsPart

logger = logging.getLogger(__name__)
WORKFLOW_SOURCE = "workflow"  # where its tools come from (TenantTools.sources)
WAIT_POLL_S = 0.2  # a child run executing elsewhere: how often its end is looked for


def workflow_tool_name(workflow: WorkflowDefinition) -> str:
    return f"{runs.WORKFLOW_TOOL_PREFIX}{workflow.slug}"


class WorkflowTools:
    label = WORKFLOW_SOURCE
    kind = "workflow"

    def tools_of(self, tenant_id: int, policy: EgressPolicy) -> TenantToolsPart:
        """One query. The tool's schemas are the document's (its steps are compiled when it
        runs: the registry is being built here); a document that does not read is left out
        (a save compiles it, so only one written around the service can be)."""
        part = TenantToolsPart()
        for workflow in _exposed(tenant_id):
            try:
                document = WorkflowDocument.model_validate(workflow.definition)
                tool = Tool(
                    name=workflow_tool_name(workflow),
                    description=workflow.description or workflow.name,
                    input_schema=document.input,
                    output_schema=document.output,
                    handler=_handler(workflow.pk),
                    tags=frozenset({"workflow"}),
                    capability=Capability(effect=Effect.WRITE, idempotent=True),
                )
            except (pydantic.ValidationError, ValueError):  # (a schema error is a ValueError)
                logger.warning("workflow %s of tenant %s does not read", workflow.slug, tenant_id)
                continue
            part.tools.append(tool)
        return part

    def names_of(self, tenant_id: int) -> set[str]:
        return {workflow_tool_name(w) for w in _exposed(tenant_id)}


WORKFLOW_TOOLS = WorkflowTools()


def _exposed(tenant_id: int):
    return WorkflowDefinition.objects.filter(tenant_id=tenant_id, enabled=True, expose_as_tool=True)


@receiver([post_save, post_delete], sender=WorkflowDefinition)
def _workflow_changed(sender, instance: WorkflowDefinition, **kwargs) -> None:
    config_changed(instance.tenant_id)  # every process builds the registry anew


def _handler(workflow_id: int):
    async def call(arguments: dict[str, Any], ctx: RunContext) -> Any:
        run = await sync_to_async(_started)(workflow_id, arguments, ctx)
        if not run.is_terminal:
            await _executed(run)
            run = await Run.objects.aget(pk=run.pk)
        if run.status != "succeeded":
            raise ToolFailed(f"workflow run {run.pk} {run.status}: {run.error or 'no output'}")
        return run.structured_output if run.structured_output is not None else run.output

    return call


def _started(workflow_id: int, arguments: dict[str, Any], ctx: RunContext) -> Run:
    """The call's workflow run: the calling run's child for this call (the same one when the
    call is made again), or a run of its own for a direct call."""
    workflows = WorkflowDefinition.objects.select_related("tenant")
    workflow = workflows.filter(pk=workflow_id, tenant_id=ctx.tenant_id).first()
    if workflow is None:
        raise ToolFailed("this workflow was deleted")
    parent = (
        Run.objects.filter(pk=ctx.run_id, tenant_id=ctx.tenant_id).first() if ctx.run_id else None
    )
    try:
        return runs.workflow_start(
            tenant=workflow.tenant,
            workflow=workflow,
            input=arguments,
            parent=parent,
            child_key=(ctx.call_id or uuid.uuid4().hex) if parent is not None else "",
            initiated_by=_initiator(ctx, parent),
            enqueue=False,  # executed here, by the caller
        )
    except ValidationError as refused:  # disabled, or its input
        raise ToolFailed(" ".join(refused.messages)) from None
    except PermissionDenied as refused:
        raise ToolFailed(str(refused)) from None


def _initiator(ctx: RunContext, parent: Run | None) -> AbstractBaseUser | ApiKey | None:
    """Whose access the call is checked against: the calling run's starter, or the user or
    key a direct call (MCP, REST) was made by; None for the platform's own calls."""
    if parent is not None:
        return parent.initiated_by_user or parent.initiated_by_api_key
    if ctx.user_id is not None:
        return get_user_model().objects.filter(pk=ctx.user_id).first()
    if ctx.api_key_id is not None:
        return ApiKey.objects.filter(pk=ctx.api_key_id, tenant_id=ctx.tenant_id).first()
    return None


async def _executed(run: Run) -> None:
    """Execute the child run here; if a worker holds it (the sweeper gave it one after this
    call's first attempt died), wait for its end, bounded by two leases."""
    outcome = await runs.execute_run_async(run.pk, tenant_id=run.tenant_id)
    if outcome != "not claimable":
        return
    deadline = time.monotonic() + 2 * runs.lease_seconds()
    while time.monotonic() < deadline:
        if await Run.objects.filter(
            pk=run.pk, status__in=("succeeded", "failed", "cancelled")
        ).aexists():
            return
        await asyncio.sleep(WAIT_POLL_S)
    raise ToolFailed(f"workflow run {run.pk} is still running elsewhere; try again later")
