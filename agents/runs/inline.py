"""A run started and executed in the caller's process (admin previews, tests, benchmarks)."""

from __future__ import annotations

import uuid

from agents.models import Agent, Conversation, Crew, Run
from agents.runs.engine import execute_run
from agents.runs.start import Initiator, run_start
from tenancy.models import Tenant


def run_inline(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    crew: Crew | None = None,
    input: str,
    conversation: Conversation | None = None,
    initiated_by: Initiator = None,
) -> Run:
    """Start and execute a run in this process (admin previews, tests, benchmarks). It is
    inserted already claimed by this caller, as a `/v1` chat's run is (agents.runs.worker.
    Nearby): no claim statement before its first model call."""
    owner = uuid.uuid4().hex
    run = run_start(
        tenant=tenant,
        agent=agent,
        crew=crew,
        input=input,
        conversation=conversation,
        initiated_by=initiated_by,
        enqueue=False,
        claimed_by=owner,
    )
    run.stored_seq = 0  # a new run: nothing stored yet
    if execute_run(run.pk, owner=owner, claimed=run) in ("lease lost", "will retry"):
        run.refresh_from_db()  # not recorded by this attempt: as the record has it
    return run
