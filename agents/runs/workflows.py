"""Workflow runs: a tenant's declared workflow (WorkflowDefinition) run as a Run of its own
(`Run.workflow`), started here, executed by the engine (claim, lease, finalize, cancel like
any run), checkpointed after every step, and resumed by whichever worker claims it next.

- `workflow_start`: who may (START_RUN; a key limited to agents runs only the workflows it
  names), the input checked against the workflow's input schema, idempotency keys, a
  parent run (a workflow called as a tool) or a trigger.
- `execute_workflow`: the engine's part. The workflow is compiled from its definition
  (`compiled_workflow`: agents.workflows' compiler), its steps run on the tenant's registry
  without the workflow tools (workflows do not call each other as tools, so none can
  recurse), and every step's output is recorded in the run's state (`{"workflow":
  StepRecords}`) as it completes: a resumed run reuses them, and a tool step's write
  started before a crash is never repeated (agents/runtime/workflow.py).
  It compiles the document the run snapshotted as it started (`Run.workflow_snapshot`),
  so an edit since never shifts the steps its records name. Its cost is its steps' model
  calls, each priced at its own model (`spent`: `RunOutcome.priced`).

The run's input is the workflow's JSON input (`Run.input` holds it as JSON text); its
output, the workflow's output (`Run.output` as text, `structured_output` as data).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone

from agents import access, quotas
from agents.models import MAX_INPUT_CHARS, Agent, Run, Trigger, WorkflowDefinition
from agents.runs import cancellation
from agents.runs.bridge import db
from agents.runs.direct_calls import run_tool_context
from agents.runs.start import Initiator, claimed_fields, replayed
from agents.runs.writer import RunEventSink, insert_run, storable
from agents.runtime.spec import AgentSpec, RunOutcome, RunStatus
from agents.runtime.tool_step import result_text
from agents.runtime.tracing import current_traceparent
from agents.runtime.workflow import (
    AgentStep,
    Branch,
    Parallel,
    Step,
    StepRecords,
    Workflow,
    WorkflowContext,
    WorkflowFailed,
)
from agents.signals import request_execution
from agents.workflows import CompiledWorkflow, workflow_compile
from providers.services import adapter_for, default_connection
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit
from tools.loader import tenant_tools
from tools.runtime.context import ConfigurationError
from tools.runtime.registry import ToolRegistry
from tools.runtime.validation import compile_validator

WORKFLOW_TOOL_PREFIX = "workflow_"  # a workflow exposed as a tool: `workflow_<slug>`
CANCEL_POLL_S = 0.5  # how often a running workflow reads its cancel flag


def compiled_workflow(
    definition: WorkflowDefinition,
    *,
    tools: ToolRegistry | None = None,
    document: dict[str, Any] | None = None,
) -> CompiledWorkflow:
    """The runtime workflow of a stored definition (`document`: its document as a run
    snapshotted it, else as it is now): agents.workflows' compiler, against the tenant's
    tools (`tools`: the registry its steps get, else the tenant's) and the agents it names
    (their specs now); WorkflowInvalid (a ConfigurationError: the tenant admin's to fix)
    with every problem at its path."""
    return workflow_compile(
        tenant=definition.tenant,
        definition=definition.definition if document is None else document,
        label=definition.slug,
        registry=tools,
    )


def snapshot(document: dict[str, Any]) -> dict[str, Any]:
    """What a workflow run keeps of its document (`Run.workflow_snapshot`): the document, and
    its digest (a run page or a query tells runs of one version of the steps apart)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {"digest": hashlib.sha256(canonical.encode()).hexdigest(), "definition": document}


def steps_registry(tenant_id: int) -> ToolRegistry:
    """The tools a workflow's steps may call: the tenant's, but the workflows exposed as
    tools (so no workflow runs another as a tool, and none can recurse)."""
    registry = tenant_tools(tenant_id).registry
    exposed = [n for n in registry.names() if n.startswith(WORKFLOW_TOOL_PREFIX)]
    return registry.filter(exclude=exposed) if exposed else registry


# -- starting ----------------------------------------------------------------------------
def workflow_start(
    *,
    tenant: Tenant,
    workflow: WorkflowDefinition,
    input: Any,
    initiated_by: Initiator = None,
    idempotency_key: str | None = None,
    parent: Run | None = None,
    child_key: str = "",
    trigger: Trigger | None = None,
    enqueue: bool = True,
    claimed_by: str | None = None,
) -> Run:
    """A queued workflow run (sent to a worker once the transaction commits; or, with
    `claimed_by`, inserted running under that caller's lease, as run_start's).

    Http404 for another tenant's workflow; ValidationError for a disabled one or an input
    its schema refuses (`{"input": ...}`), or one that does not compile; PermissionDenied
    unless `initiated_by` may start it (access.may_start_workflow; for a child run, the
    parent's starter: may use the agents it names). A child run (`parent`, `child_key`: a workflow
    called as a tool) is the parent's for that key: called again, the same run."""
    if workflow.tenant_id != tenant.pk:
        raise Http404("No such workflow.")
    if not workflow.enabled:
        raise ValidationError({"workflow": "This workflow is disabled."})
    if initiated_by is not None:
        principal = Principal.for_initiator(tenant, initiated_by)
        if parent is None:
            principal.require(Action.START_RUN)
            allowed = access.may_start_workflow(principal, workflow)
        else:  # an agent's tool call, in a run `initiated_by` started: its agents' grants
            allowed = access.may_use_workflow_agents(principal, workflow)
        if not allowed:
            raise PermissionDenied("You may not run this workflow.")
    try:
        compiled = compiled_workflow(workflow, tools=steps_registry(workflow.tenant_id))
    except ConfigurationError as exc:
        raise ValidationError({"workflow": str(exc)}) from None
    text = check_workflow_input(compiled, input)
    if parent is not None:
        existing = Run.objects.filter(parent=parent, child_key=child_key).first()
        if existing is not None:
            return existing
    if idempotency_key:
        existing = Run.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if existing is not None:
            return replayed(existing, initiated_by)
    user = initiated_by if isinstance(initiated_by, AbstractBaseUser) else None
    api_key = initiated_by if isinstance(initiated_by, ApiKey) else None
    run = Run(
        tenant=tenant,
        workflow=workflow,
        parent=parent,
        child_key=child_key,
        depth=parent.depth + 1 if parent is not None else 0,
        initiated_by_user_id=user.pk if user else parent and parent.initiated_by_user_id,
        initiated_by_api_key_id=(
            api_key.pk if api_key else parent and parent.initiated_by_api_key_id
        ),
        input=text,
        workflow_snapshot=snapshot(workflow.definition),
        correlation_id=parent.correlation_id if parent is not None else uuid.uuid4().hex,
        traceparent=current_traceparent(),
        queued_at=timezone.now(),
        idempotency_key=idempotency_key or None,
        trigger=trigger,
        **(claimed_fields(claimed_by) if claimed_by else {}),
    )
    try:
        with transaction.atomic():
            insert_run(run, audit.run_started_entry(run, api_key) if api_key else None)
            if enqueue and not claimed_by:
                transaction.on_commit(lambda: request_execution(run.pk, tenant.pk))
    except IntegrityError:  # the same key (or child key), concurrently
        if parent is not None:
            return Run.objects.get(parent=parent, child_key=child_key)
        existing = Run.objects.get(tenant=tenant, idempotency_key=idempotency_key)
        return replayed(existing, initiated_by)
    return run


def check_workflow_input(compiled: CompiledWorkflow, value: Any) -> str:
    """The input as the run stores it (JSON text), once its schema accepts it."""
    try:
        error = compile_validator(compiled.input_schema)(value)
        text = json.dumps(value, ensure_ascii=False)
    except (RecursionError, TypeError, ValueError):  # nested too deep, or not JSON
        raise ValidationError({"input": "The input must be JSON, nested not too deep."}) from None
    if error is not None:
        raise ValidationError({"input": f"The input does not fit the workflow: {error}"})
    if len(text) > MAX_INPUT_CHARS:
        raise ValidationError({"input": f"At most {MAX_INPUT_CHARS} characters of JSON."})
    return text


# -- executing ---------------------------------------------------------------------------
@dataclass
class _Prepared:
    compiled: CompiledWorkflow
    registry: ToolRegistry
    secrets: Any
    adapters: dict[str, Any]
    connections: dict[str, str]  # each agent step's connection (by agent name), to price it
    ctx: Any  # the RunContext its tool steps get


def _prepare(run: Run) -> _Prepared | str:
    """What the workflow's steps need, read before any of them runs; or why it cannot."""
    definition = run.workflow
    if definition is None:
        return "the workflow of this run was deleted"
    toolbox = tenant_tools(run.tenant_id)
    registry = steps_registry(run.tenant_id)
    # The steps it began with (its records' paths are theirs), not the workflow as edited
    # since; a run from before snapshots were kept has none.
    began_with = (run.workflow_snapshot or {}).get("definition")
    compiled = compiled_workflow(definition, tools=registry, document=began_with)
    adapters, connections = {}, {}
    for spec in _agent_specs(compiled.workflow):
        if spec.name in adapters:
            continue
        agent = Agent.objects.filter(tenant_id=run.tenant_id, slug=spec.name).first()
        connection = (agent and agent.provider_connection) or default_connection(run.tenant)
        if connection is None:
            return "no provider connection: an admin must add one (Admin → Provider connections)"
        meter = quotas.Meter.for_run(run, agent.pk if agent else None)
        adapters[spec.name] = quotas.metered(adapter_for(connection), meter)
        connections[spec.name] = connection.name
    ctx = run_tool_context(run, toolbox.secrets)
    return _Prepared(compiled, registry, toolbox.secrets, adapters, connections, ctx)


def _agent_specs(step: Step) -> Iterator[AgentSpec]:
    if isinstance(step, AgentStep):
        if step.adapter is None:
            yield step.spec
    elif isinstance(step, Workflow):
        for inner in step.steps:
            yield from _agent_specs(inner)
    elif isinstance(step, Parallel):
        for inner in step.branches:
            yield from _agent_specs(inner)
    elif isinstance(step, Branch):
        yield from _agent_specs(step.if_true)
        if step.if_false is not None:
            yield from _agent_specs(step.if_false)


async def execute_workflow(run: Run, sink: RunEventSink) -> RunOutcome:
    """Run (or resume) the run's workflow under the engine's lease; every step recorded as
    it completes. A failed step fails the run, naming it; a cancel stops it between polls."""
    prepared = await db(_prepare)(run)
    if isinstance(prepared, str):
        return await _end(sink, RunOutcome(status=RunStatus.FAILED, error=prepared))
    writer = sink.writer
    writer.redact_with(prepared.secrets)
    saved = (run.state or {}).get("workflow")
    if saved is None:
        await sink.emit("run.started", {"workflow": run.workflow.slug})

    async def save(document: dict[str, Any], durable: bool) -> None:
        if durable:
            await writer.save(state={"workflow": document})
        else:
            writer.save_behind(state={"workflow": document})

    records = StepRecords(saved, save=save)
    wctx = WorkflowContext(
        registry=prepared.registry,
        ctx=prepared.ctx,
        sink=sink,
        adapter_for=_adapter_for(prepared.adapters),
        records=records,
    )
    value = json.loads(run.input) if run.input else None
    running = asyncio.ensure_future(prepared.compiled.workflow.run(value, wctx))
    is_cancelled = cancellation.checker(run)
    try:
        while not running.done():
            await asyncio.wait({running}, timeout=CANCEL_POLL_S)
            if not running.done() and await is_cancelled():
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
                cancelled = RunOutcome(status=RunStatus.CANCELLED, **spent(records, prepared))
                return await _end(sink, cancelled)
        output = running.result()
    except WorkflowFailed as exc:
        failed = RunOutcome(status=RunStatus.FAILED, error=str(exc), **spent(records, prepared))
        return await _end(sink, failed)
    finally:
        if not running.done():  # the engine's task was cancelled (a lost lease)
            running.cancel()
    structured = storable(output) if not isinstance(output, str) else None
    outcome = RunOutcome(
        status=RunStatus.SUCCEEDED,
        output=result_text(output),
        structured_output=structured,
        **spent(records, prepared),
    )
    return await _end(sink, outcome)


def spent(records: StepRecords, prepared: _Prepared) -> dict[str, Any]:
    """The outcome's usage: its steps' model calls (their tokens, and each call priced at its
    own model: an agent step's at its agent's connection)."""
    priced = []
    for entry in records.spent:
        entry = dict(entry)
        if agent := entry.pop("agent", None):
            entry["connection"] = prepared.connections.get(agent, "")
        priced.append(entry)
    return {"usage": records.usage, "priced": priced}


def _adapter_for(adapters: dict[str, Any]) -> Callable[[AgentSpec], Any]:
    def adapter(spec: AgentSpec) -> Any:
        return adapters.get(spec.name)

    return adapter


async def _end(sink: RunEventSink, outcome: RunOutcome) -> RunOutcome:
    if outcome.status is RunStatus.SUCCEEDED:
        payload = {"status": "succeeded", "output": outcome.structured_output}
        if outcome.structured_output is None:
            payload["output"] = outcome.output
        await sink.emit("run.completed", payload)
    elif outcome.status is RunStatus.CANCELLED:
        await sink.emit("run.cancelled", {"status": "cancelled"})
    else:
        await sink.emit("run.failed", {"status": "failed", "error": outcome.error})
    return outcome
