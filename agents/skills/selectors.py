"""Reading skills: what the faces list, and what a run is given. Never another tenant's
rows; one asked for by name or number answers 404."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Max, Q, QuerySet
from django.http import Http404

from agents.models import Agent
from agents.skills.models import AgentSkill, Skill, SkillFile, SkillStatus, SkillVersion
from tenancy.models import Tenant


@dataclass(frozen=True)
class UsableSkill:
    """A skill as a run has it: the approved version an agent's pin resolves to."""

    name: str
    description: str
    version_id: int
    number: int

    @property
    def label(self) -> str:
        return f"{self.name}@{self.number}"


def skills_of(tenant: Tenant) -> QuerySet[Skill]:
    """The tenant's skills by name, each with `version_count` and `latest_approved` (the
    number, or None). One query."""
    return Skill.objects.filter(tenant=tenant).annotate(
        version_count=Count("versions"),
        latest_approved=Max("versions__number", filter=Q(versions__status=SkillStatus.APPROVED)),
    )


def skill_named(tenant: Tenant, name: str) -> Skill:
    skill = Skill.objects.filter(tenant=tenant, name=str(name)[:64]).first()
    if skill is None:
        raise Http404("No such skill.")
    return skill


def skill_versions(skill: Skill) -> QuerySet[SkillVersion]:
    """Newest first, with their files' count and who approved them."""
    return (
        SkillVersion.objects.filter(tenant_id=skill.tenant_id, skill=skill)
        .select_related("approved_by", "uploaded_by")
        .annotate(file_count=Count("files"))
        .order_by("-number")
    )


def skill_version_of(tenant: Tenant, name: str, number: object) -> SkillVersion:
    skill = skill_named(tenant, name)
    try:
        wanted = int(str(number))
    except ValueError:
        raise Http404("No such skill version.") from None
    version = (
        SkillVersion.objects.filter(tenant=tenant, skill=skill, number=wanted)
        .select_related("skill")
        .first()
    )
    if version is None:
        raise Http404("No such skill version.")
    return version


def skill_version_files(version: SkillVersion) -> list[tuple[str, int]]:
    """(path, size) of a version's files, by path."""
    return list(
        SkillFile.objects.filter(tenant_id=version.tenant_id, version=version)
        .order_by("path")
        .values_list("path", "size")
    )


def agent_skill_pins(agent: Agent) -> list[AgentSkill]:
    return list(
        AgentSkill.objects.filter(tenant_id=agent.tenant_id, agent=agent).select_related(
            "skill", "version"
        )
    )


def agent_usable_skills(agent: Agent) -> list[UsableSkill]:
    """The approved version each of the agent's pins resolves to, by name: a pinned number,
    or the latest approved. Two queries."""
    pins = agent_skill_pins(agent)
    latest_of = [p.skill_id for p in pins if p.version_id is None]
    latest: dict[int, SkillVersion] = {}
    if latest_of:
        for version in SkillVersion.objects.filter(
            tenant_id=agent.tenant_id, skill_id__in=latest_of, status=SkillStatus.APPROVED
        ).order_by("skill_id", "-number"):
            latest.setdefault(version.skill_id, version)
    usable = []
    for pin in pins:
        version = pin.version or latest.get(pin.skill_id)
        if version is None or version.status != SkillStatus.APPROVED:
            continue
        usable.append(UsableSkill(pin.skill.name, version.description, version.pk, version.number))
    return sorted(usable, key=lambda s: s.name)


def skills_labelled(tenant_id: int, labels: list[str]) -> list[UsableSkill]:
    """The approved versions named `name@N` (a run's record), by name; a label naming no
    such version (malformed, or another tenant's) is left out. One query."""
    wanted = Q(pk__in=[])
    for label in labels:
        name, _, number = str(label).partition("@")
        if number.isdigit() and len(number) <= 9:
            wanted |= Q(skill__name=name[:64], number=int(number))
    versions = SkillVersion.objects.filter(
        wanted, tenant_id=tenant_id, status=SkillStatus.APPROVED
    ).select_related("skill")
    return sorted(
        (UsableSkill(v.skill.name, v.description, v.pk, v.number) for v in versions),
        key=lambda s: s.name,
    )


def skill_instructions(tenant_id: int, version_id: int) -> str:
    version = SkillVersion.objects.filter(tenant_id=tenant_id, pk=version_id).first()
    if version is None:
        raise Http404("No such skill version.")
    return version.instructions


def skill_file_content(tenant_id: int, version_id: int, path: str) -> bytes | None:
    """A file's bytes in exactly that version (None when it has no such path)."""
    row = (
        SkillFile.objects.filter(tenant_id=tenant_id, version_id=version_id, path=path)
        .values_list("content", flat=True)
        .first()
    )
    return bytes(row) if row is not None else None


@dataclass(frozen=True)
class PinShown:
    """An agent's pin of a skill as its page shows it: `label` name@N or name@latest, and
    the version a `latest` pin resolves to now (`now`)."""

    agent_name: str
    agent_slug: str
    label: str
    now: int | None = None


def skill_pins_by_skill(tenant: Tenant) -> dict[int, list[PinShown]]:
    """Each skill's pins (by skill id), by agent name: who uses which version. Two
    queries."""
    latest = dict(
        SkillVersion.objects.filter(tenant=tenant, status=SkillStatus.APPROVED)
        .values("skill_id")
        .annotate(n=Max("number"))
        .values_list("skill_id", "n")
    )
    pins: dict[int, list[PinShown]] = {}
    rows = (
        AgentSkill.objects.filter(tenant=tenant)
        .select_related("agent", "skill", "version")
        .order_by("agent__name", "agent__slug")
    )
    for pin in rows:
        if pin.version is not None:
            shown = PinShown(
                pin.agent.name, pin.agent.slug, f"{pin.skill.name}@{pin.version.number}"
            )
        else:
            label = f"{pin.skill.name}@latest"
            shown = PinShown(pin.agent.name, pin.agent.slug, label, latest.get(pin.skill_id))
        pins.setdefault(pin.skill_id, []).append(shown)
    return pins


def skill_pin_choices(tenant: Tenant) -> list[str]:
    """What an agent may pin: `name@latest` and `name@N` for each approved version, by name
    and number (one query)."""
    approved = (
        SkillVersion.objects.filter(tenant=tenant, status=SkillStatus.APPROVED)
        .order_by("skill__name", "-number")
        .values_list("skill__name", "number")
    )
    choices: list[str] = []
    for name, number in approved:
        if f"{name}@latest" not in choices:
            choices.append(f"{name}@latest")
        choices.append(f"{name}@{number}")
    return choices
