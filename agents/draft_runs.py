"""An evaluation's run of a draft (agents/publishing.py): the agent or crew it executes is the
live one with the draft's fields set in memory (and its parts: an agent's skill pins, a
crew's members), and what it records as the configuration it used names the draft. Only an
evaluation of a draft sets `Run.agent_draft`; every other run executes the live agent or
crew (a drafted crew's members run as they are live). Imported by the engine (agents.runs),
so it imports neither the evaluations nor the publishing services."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from agents import skills
from agents.models import Agent, AgentDraft, Crew, Run
from base import versions
from tenancy.records import history


def agent_of_run(run: Run) -> Agent | str | None:
    """The agent `run` executes: its agent as stored, or for an evaluation's run of a draft,
    the agent with the draft's fields (in memory, never saved) and `drafted_skills` (what
    its pins give the run); a string says why it cannot run. No query for a run of no
    draft."""
    agent = run.agent
    if run.agent_draft_id is None or agent is None:
        return agent
    draft = AgentDraft.objects.filter(pk=run.agent_draft_id, agent=agent).first()
    if draft is None:
        return "the draft this run evaluates is gone"
    try:
        _set_fields(agent, draft)
        if "skills" in draft.parts:
            agent.drafted_skills = skills_tried(agent, draft.parts["skills"])
    except ValidationError as exc:
        return f"the draft cannot be run: {' '.join(exc.messages)}"
    return agent


def crew_of_run(run: Run) -> tuple[Crew, dict[str, Agent]] | str:
    """For an evaluation's run of a crew's draft: the crew with the draft's fields (in
    memory) and its members by slug, as drafted; a string says why it cannot run."""
    crew = Crew.objects.select_related(
        "manager", "manager__compaction_connection", "compaction_connection"
    ).get(pk=run.crew_id)
    draft = AgentDraft.objects.filter(pk=run.agent_draft_id, crew=crew).first()
    if draft is None:
        return "the draft this run evaluates is gone"
    try:
        _set_fields(crew, draft)
        if "members" in draft.parts:
            members = _members_named(run.tenant_id, draft.parts["members"])
        else:
            members = [m.agent for m in crew.members.select_related("agent")]
    except ValidationError as exc:
        return f"the draft cannot be run: {' '.join(exc.messages)}"
    return crew, {agent.slug: agent for agent in members}


def _members_named(tenant_id: int, slugs: list[str]) -> list[Agent]:
    found = {a.slug: a for a in Agent.objects.filter(tenant_id=tenant_id, slug__in=slugs)}
    if missing := [slug for slug in slugs if slug not in found]:
        raise ValidationError(f"its members include deleted agents: {', '.join(missing)}.")
    return [found[slug] for slug in slugs]


def _set_fields(target: Agent | Crew, draft: AgentDraft) -> None:
    fields = history.restorable_changes(
        history.kind_of(type(target)), draft.tenant, target, {"fields": draft.fields}
    )
    for name, value in fields.items():
        setattr(target, name, value)


class _Tried(Exception):
    def __init__(self, value: list[skills.UsableSkill]) -> None:
        self.value = value


def skills_tried(agent: Agent, labels: list[str]) -> list[skills.UsableSkill]:
    """What pins `labels` give `agent`: set by `agent_skills_set` itself (its rules: the
    skill installed, the version approved) in a savepoint rolled back, with its audit
    entry, version and cache bumps; ValidationError when they do not resolve. A few
    queries."""
    pins = skills.pins_parsed(agent.tenant, labels)
    try:
        with transaction.atomic(), versions.held():
            skills.agent_skills_set(tenant=agent.tenant, by=None, agent=agent, pins=pins)
            raise _Tried(skills.agent_usable_skills(agent))
    except _Tried as tried:
        return tried.value


def draft_run_versions(versions: dict[str, Any], run: Run) -> dict[str, Any]:
    """What a draft's run records as the configuration it used: the draft, not the live
    agent's or crew's version (`Run.config_versions`)."""
    if run.agent_draft_id is None:
        return versions
    live = "agents.crew" if run.crew_id is not None else "agents.agent"
    kept = {label: pairs for label, pairs in versions.items() if label != live}
    return {**kept, "agents.agentdraft": [[run.agent_draft_id, 0]]}
