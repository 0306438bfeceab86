"""What a run is given of its agent's skills, by progressive disclosure: its prompt names
each usable skill (name and description only); `load_skill` returns a skill's instructions;
`read_skill_file` returns the text of one of its files, read-only, from exactly the version
the run was given. A skill's scripts are never run on the host: `read_skill_file` returns
their text like any other file's, and an agent in code mode runs them in its program's
sandbox (`run_code`); the prompt says which of the two the agent can do.

The versions are fixed at the run's start (its `run.skills` event records them as
name@version): a run that goes on later — parked for approval, resumed after a failure —
is given exactly those (`pinned`), never a newer approved one.

The tools are made for one run, bound to its tenant and to the versions it was given: a
name or path outside them is a ToolFailed the model sees, never another version's file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from agents.models import Agent
from agents.skills.selectors import (
    UsableSkill,
    agent_usable_skills,
    skill_file_content,
    skill_instructions,
    skills_labelled,
)
from base.versions import per_config_version
from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed

LOAD_TOOL = "load_skill"
READ_TOOL = "read_skill_file"
CONTEXT_TITLE = "Skills"
FILE_CHARS_MAX = 100_000  # a file's text given to the model at most (the rest cut, said so)


@dataclass(frozen=True)
class RunSkills:
    context_blocks: tuple[tuple[str, str], ...] = ()
    tools: tuple[Tool, ...] = ()
    listed: tuple[str, ...] = ()  # name@version of each, for the run's `run.skills` event


# How a skill's scripts run, by whether the run is in code mode (docs/skills.md).
_SCRIPTS = {
    False: "Scripts in a skill cannot be run here: read them for what they do.",
    True: (
        f"To run a skill's script, call run_code with a program that reads it with "
        f"{READ_TOOL}(skill=..., path=...) and runs its text (exec), then calls what it "
        "defines; it runs in the program's sandbox."
    ),
}

_usable: dict[int, tuple[str, dict[int, list[UsableSkill]]]] = {}


def usable_skills(agent: Agent) -> list[UsableSkill]:
    """The agent's usable skills, kept per tenant configuration version (every skill or pin
    change moves it): no query for a run of an unchanged configuration."""
    kept = per_config_version(_usable, agent.tenant_id, dict)
    if agent.pk not in kept:
        kept[agent.pk] = agent_usable_skills(agent)
    return list(kept[agent.pk])


def run_skills(
    agent: Agent, *, code_mode: bool = False, pinned: list[str] | None = None
) -> RunSkills:
    """The prompt's block and the two tools, or nothing for an agent with no usable skill.
    `pinned`: the name@version labels a run that started earlier was given (those versions
    exactly); None: what the agent's pins resolve to now. `code_mode`: the run offers
    `run_code`, whose programs can run a skill's scripts."""
    if pinned is not None:
        skills = skills_labelled(agent.tenant_id, pinned) if pinned else []
    else:
        skills = usable_skills(agent)
    if not skills:
        return RunSkills()
    lines = [
        "You have these skills. When a task matches one, call "
        f"{LOAD_TOOL} with its name to read its instructions, then follow them; read the "
        f"files they mention with {READ_TOOL}. {_SCRIPTS[code_mode]}",
        "",
    ]
    lines += [f"- {s.name}: {' '.join(s.description.split())}" for s in skills]
    tools = (_load_tool(agent.tenant_id, skills), _read_tool(agent.tenant_id, skills))
    return RunSkills(
        context_blocks=((CONTEXT_TITLE, "\n".join(lines)),),
        tools=tools,
        listed=tuple(s.label for s in skills),
    )


def _skill(skills: dict[str, UsableSkill], arguments: dict[str, Any]) -> UsableSkill:
    name = str(arguments.get("name") or arguments.get("skill") or "").strip()
    skill = skills.get(name)
    if skill is None:
        known = ", ".join(sorted(skills))
        raise ToolFailed(f"no skill named {name[:64]!r}; this agent's skills: {known}")
    return skill


def _load_tool(tenant_id: int, given: list[UsableSkill]) -> Tool:
    skills = {s.name: s for s in given}

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if int(ctx.tenant_id) != tenant_id:
            raise ToolFailed("these skills belong to another run")
        skill = _skill(skills, arguments)
        text = await sync_to_async(skill_instructions)(tenant_id, skill.version_id)
        return {"skill": skill.name, "version": skill.number, "instructions": text}

    return Tool(
        name=LOAD_TOOL,
        description="Read the instructions of one of your skills (named in your prompt).",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string", "enum": sorted(skills)}},
            "required": ["name"],
            "additionalProperties": False,
        },
        handler=handler,
        tags=frozenset({"skills"}),
        capability=Capability(effect=Effect.READ, idempotent=True, timeout_s=30.0),
    )


def _read_tool(tenant_id: int, given: list[UsableSkill]) -> Tool:
    skills = {s.name: s for s in given}

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if int(ctx.tenant_id) != tenant_id:
            raise ToolFailed("these skills belong to another run")
        skill = _skill(skills, arguments)
        path = str(arguments.get("path", "")).strip().removeprefix("./")
        if not path or len(path) > 255:
            raise ToolFailed("give the file's path inside the skill, e.g. references/guide.md")
        content = await sync_to_async(skill_file_content)(tenant_id, skill.version_id, path)
        if content is None:  # exact paths only: nothing outside the version can match
            raise ToolFailed(f"{skill.name} has no file {path[:255]!r}")
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailed(f"{path[:255]!r} is not a text file") from None
        result: dict[str, Any] = {"skill": skill.name, "path": path, "text": text[:FILE_CHARS_MAX]}
        if len(text) > FILE_CHARS_MAX:
            result["truncated"] = f"the first {FILE_CHARS_MAX} of {len(text)} characters"
        return result

    return Tool(
        name=READ_TOOL,
        description=(
            "Read a file of one of your skills (a reference, template or script's text), "
            "by its path inside the skill, e.g. references/guide.md. Read-only."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "skill": {"type": "string", "enum": sorted(skills)},
                "path": {"type": "string", "maxLength": 255},
            },
            "required": ["skill", "path"],
            "additionalProperties": False,
        },
        handler=handler,
        tags=frozenset({"skills"}),
        capability=Capability(effect=Effect.READ, idempotent=True, timeout_s=30.0),
    )
