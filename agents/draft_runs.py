"""An evaluation's run of an agent's draft (agents/publishing.py): the agent it executes is
the live one with the draft's fields set in memory, and what it records as the configuration
it used names the draft. Only an evaluation of a draft sets `Run.agent_draft`; every other
run executes the live agent. Imported by the engine (agents.runs), so it imports neither the
evaluations nor the publishing services."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from agents.models import Agent, AgentDraft, Run
from tenancy.records import history


def agent_of_run(run: Run) -> Agent | str | None:
    """The agent `run` executes: its agent as stored, or for an evaluation's run of a draft,
    the agent with the draft's fields (in memory, never saved); a string says why it cannot
    run. No query for a run of no draft."""
    agent = run.agent
    if run.agent_draft_id is None or agent is None:
        return agent
    draft = AgentDraft.objects.filter(pk=run.agent_draft_id, agent=agent).first()
    if draft is None:
        return "the draft this run evaluates is gone"
    try:
        fields = history.restorable_changes(
            history.kind_of(Agent), run.tenant, agent, {"fields": draft.fields}
        )
    except ValidationError as exc:
        return f"the draft cannot be run: {' '.join(exc.messages)}"
    for name, value in fields.items():
        setattr(agent, name, value)
    return agent


def draft_run_versions(versions: dict[str, Any], run: Run) -> dict[str, Any]:
    """What a draft's run records as the configuration it used: the draft, not the live
    agent's version (`Run.config_versions`)."""
    if run.agent_draft_id is None:
        return versions
    kept = {label: pairs for label, pairs in versions.items() if label != "agents.agent"}
    return {**kept, "agents.agentdraft": [[run.agent_draft_id, 0]]}
