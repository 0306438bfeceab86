"""A tenant's skills (the open Agent Skills format): installed as numbered versions,
approved by an admin, pinned by agents, disclosed to a run progressively. Everything outside
this package imports from here, never from a module inside (an import-linter contract says
so; `agents.models` alone imports `models.py`, for Django). docs/skills.md describes it.

    models.py      Skill, SkillVersion (an upload; draft or approved), SkillFile (its files
                   as rows), AgentSkill (an agent's pin: a version, or the latest approved)
    package.py     reading a zip or folder safely; every hostile package refused, clearly
    services.py    skill_import, skill_version_approve, agent_skills_set (the policy asked)
    selectors.py   the faces' reads, and the approved versions an agent's pins resolve to
    disclosure.py  what a run is given: the prompt's list, `load_skill`, `read_skill_file`
    document.py    the configuration document's `skills` section: export, checks, writes
"""

from agents.skills.disclosure import LOAD_TOOL, READ_TOOL, RunSkills, run_skills
from agents.skills.document import (
    skill_document_delete,
    skill_document_problems,
    skill_document_save,
    skill_entry_compared,
    skill_files_inline,
    skill_version_entries,
)
from agents.skills.models import AgentSkill, Skill, SkillFile, SkillStatus, SkillVersion
from agents.skills.package import Limits, PackageRefused, SkillPackage, read_folder, read_zip
from agents.skills.selectors import (
    PinShown,
    UsableSkill,
    agent_skill_pins,
    agent_usable_skills,
    skill_named,
    skill_pin_choices,
    skill_pins_by_skill,
    skill_version_files,
    skill_version_of,
    skill_versions,
    skills_of,
)
from agents.skills.services import (
    Pin,
    agent_pin_labels,
    agent_skills_set,
    parse_pin,
    pin_labels_of,
    pins_parsed,
    skill_import,
    skill_package_read,
    skill_package_read_path,
    skill_restore_refused,
    skill_version_approve,
    skill_version_states,
)

__all__ = [
    "LOAD_TOOL",
    "READ_TOOL",
    "AgentSkill",
    "Limits",
    "PackageRefused",
    "Pin",
    "PinShown",
    "RunSkills",
    "Skill",
    "SkillFile",
    "SkillPackage",
    "SkillStatus",
    "SkillVersion",
    "UsableSkill",
    "agent_pin_labels",
    "agent_skill_pins",
    "agent_skills_set",
    "agent_usable_skills",
    "parse_pin",
    "pin_labels_of",
    "pins_parsed",
    "read_folder",
    "read_zip",
    "run_skills",
    "skill_document_delete",
    "skill_document_problems",
    "skill_document_save",
    "skill_entry_compared",
    "skill_files_inline",
    "skill_import",
    "skill_named",
    "skill_package_read",
    "skill_package_read_path",
    "skill_pin_choices",
    "skill_pins_by_skill",
    "skill_restore_refused",
    "skill_version_approve",
    "skill_version_entries",
    "skill_version_files",
    "skill_version_of",
    "skill_version_states",
    "skill_versions",
    "skills_of",
]
