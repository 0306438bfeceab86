"""Installing a skill version, approving one, and an agent's pins: the writes every face
(page, REST, `manage.py skills import`, the configuration document) calls.

Policy: installing and approving are `Action.CHANGE_CONFIG` (an admin, or a key with the
`config` scope), as for every other piece of a tenant's configuration; `by` is who acts
(None: a caller that asked the policy itself — a REST serializer or the configuration
import behind their face's check — or the platform, for a management command).
Each write records an audit entry and the skill's (or the agent's) configuration history
in its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.http import Http404
from django.utils import timezone

from agents.models import Agent
from agents.skills.models import AgentSkill, Skill, SkillFile, SkillStatus, SkillVersion
from agents.skills.package import (
    Limits,
    PackageRefused,
    SkillPackage,
    read_folder,
    read_zip,
)
from base.versions import config_changed
from tenancy.models import AuditAction, Tenant
from tenancy.policy import Action, Principal
from tenancy.records import audit, history

LATEST = "latest"


@dataclass(frozen=True)
class Pin:
    """A skill an agent uses: `version` a number, or None for its latest approved one."""

    skill: str
    version: int | None = None

    @property
    def label(self) -> str:
        return f"{self.skill}@{self.version if self.version is not None else LATEST}"


def _actor(by: Principal | None):
    """Who the audit log names: None lets it name the request's actor ("system" outside
    one: a management command)."""
    if by is None:
        return None
    return by.api_key if by.api_key is not None else by.user


def _allowed(tenant: Tenant, by: Principal | None) -> None:
    if by is not None:
        if by.tenant.pk != tenant.pk:
            raise Http404("No such tenant.")
        by.require(Action.CHANGE_CONFIG)


def skill_package_read(data: bytes) -> SkillPackage:
    """The package in an uploaded zip; ValidationError {"file": why} when refused."""
    try:
        return read_zip(data, Limits())
    except PackageRefused as exc:
        raise ValidationError({"file": str(exc)}) from None


def skill_package_read_path(path: str | Path) -> SkillPackage:
    """The package in a folder or a zip file on this machine (the management command).
    ValidationError when refused."""
    where = Path(path)
    try:
        if where.is_dir() and not where.is_symlink():
            return read_folder(where, Limits())
        if not where.is_file():
            raise PackageRefused(f"{where}: no such folder or zip file.")
        with open(where, "rb") as handle:
            data = handle.read(Limits().archive_bytes + 1)
        return read_zip(data, Limits())
    except PackageRefused as exc:
        raise ValidationError({"file": str(exc)}) from None


def skill_import(
    *, tenant: Tenant, by: Principal | None, package: SkillPackage
) -> tuple[SkillVersion, bool]:
    """(version, created): a new draft version of the package's skill (the skill made on its
    first upload), or the existing version whose content is identical (created False).
    Holds the skill's row while numbering, so concurrent uploads number in turn."""
    _allowed(tenant, by)
    with transaction.atomic():
        try:
            with transaction.atomic():  # a first upload racing another: one makes the skill
                skill, made = Skill.objects.get_or_create(
                    tenant=tenant, name=package.name, defaults={"description": package.description}
                )
        except IntegrityError:
            skill, made = Skill.objects.get(tenant=tenant, name=package.name), False
        skill = Skill.objects.select_for_update().get(pk=skill.pk)
        same = SkillVersion.objects.filter(skill=skill, sha256=package.sha256).first()
        if same is not None:
            return same, False
        last = SkillVersion.objects.filter(skill=skill).aggregate(n=Max("number"))["n"] or 0
        version = SkillVersion.objects.create(
            tenant=tenant,
            skill=skill,
            number=last + 1,
            description=package.description,
            instructions=package.instructions,
            front_matter=package.front_matter,
            sha256=package.sha256,
            size=package.size,
            uploaded_by=by.user if by is not None and by.api_key is None else None,
        )
        SkillFile.objects.bulk_create(
            SkillFile(
                tenant=tenant,
                version=version,
                path=f.path,
                content=f.content,
                size=f.size,
                sha256=f.sha256,
            )
            for f in package.files
        )
        if not made and skill.description != package.description:
            skill.description = package.description
            skill.save(update_fields=["description"])
        audit.record(
            tenant=tenant,
            action=AuditAction.CONFIG_CREATED,
            actor=_actor(by),
            obj=version,
            details={
                "skill": skill.name,
                "version": version.number,
                "files": len(package.files),
                "bytes": package.size,
                "sha256": package.sha256,
            },
        )
        history.record(skill, actor=_actor(by))
        config_changed(tenant.pk)
    return version, True


def skill_version_approve(*, tenant: Tenant, by: Principal | None, version: SkillVersion) -> None:
    """Make `version` usable by agents (idempotent). 404 for another tenant's."""
    _allowed(tenant, by)
    if version.tenant_id != tenant.pk:
        raise Http404("No such skill version.")
    with transaction.atomic():
        locked = SkillVersion.objects.select_for_update().get(pk=version.pk)
        if locked.status == SkillStatus.APPROVED:
            return
        locked.status = SkillStatus.APPROVED
        locked.approved_by = by.user if by is not None and by.api_key is None else None
        locked.approved_at = timezone.now()
        locked.save(update_fields=["status", "approved_by", "approved_at"])
        audit.record(
            tenant=tenant,
            action=AuditAction.CONFIG_CHANGED,
            actor=_actor(by),
            obj=locked,
            changes={"status": [SkillStatus.DRAFT.value, SkillStatus.APPROVED.value]},
        )
        history.record(locked.skill, actor=_actor(by))
        config_changed(tenant.pk)
    version.status, version.approved_at = locked.status, locked.approved_at


def agent_skills_set(
    *, tenant: Tenant, by: Principal | None, agent: Agent, pins: list[Pin]
) -> list[Pin]:
    """Replace `agent`'s pins. Refused (ValidationError {"skills": why}, nothing changed): a
    skill the tenant does not have, a version that does not exist or is not approved, a
    "latest" pin of a skill with no approved version, a skill named twice."""
    _allowed(tenant, by)
    if agent.tenant_id != tenant.pk:
        raise Http404("No such agent.")
    names = [pin.skill for pin in pins]
    if len(set(names)) != len(names):
        raise ValidationError({"skills": "A skill is named twice."})
    with transaction.atomic():
        skills = {s.name: s for s in Skill.objects.filter(tenant=tenant, name__in=names)}
        rows = []
        for pin in pins:
            skill = skills.get(pin.skill)
            if skill is None:
                raise ValidationError({"skills": f"No skill named “{pin.skill[:64]}”."})
            approved = SkillVersion.objects.filter(skill=skill, status=SkillStatus.APPROVED)
            version = None
            if pin.version is None:
                if not approved.exists():
                    raise ValidationError(
                        {"skills": f"“{skill.name}” has no approved version yet."}
                    )
            else:
                version = approved.filter(number=pin.version).first()
                if version is None:
                    raise ValidationError(
                        {"skills": f"“{skill.name}” has no approved version {pin.version}."}
                    )
            rows.append(AgentSkill(tenant=tenant, agent=agent, skill=skill, version=version))
        before = agent_pin_labels(agent)
        AgentSkill.objects.filter(agent=agent).delete()
        AgentSkill.objects.bulk_create(rows)
        after = agent_pin_labels(agent)
        if before != after:
            audit.record(
                tenant=tenant,
                action=AuditAction.CONFIG_CHANGED,
                actor=_actor(by),
                obj=agent,
                changes={"skills": [before, after]},
            )
            history.record(agent, actor=_actor(by))
            config_changed(tenant.pk)
    return [Pin(p.skill.name, p.version.number if p.version else None) for p in rows]


def pin_labels_of(agent: Agent) -> list[str]:
    """`agent_pin_labels` from its prefetched pins (`skill_pins__skill`,
    `skill_pins__version`), else with its one query; [] for an unsaved agent."""
    if agent.pk is None:
        return []
    if "skill_pins" not in getattr(agent, "_prefetched_objects_cache", {}):
        return agent_pin_labels(agent)
    return sorted(
        Pin(p.skill.name, p.version.number if p.version else None).label
        for p in agent.skill_pins.all()
    )


def agent_pin_labels(agent: Agent) -> list[str]:
    """`name@N` / `name@latest` of the agent's pins, by name (one query): the agent's
    configuration history part."""
    pins = AgentSkill.objects.filter(agent=agent).select_related("skill", "version")
    return sorted(Pin(p.skill.name, p.version.number if p.version else None).label for p in pins)


def pins_parsed(tenant: Tenant, labels: list[str]) -> list[Pin]:
    """A configuration version's `skills` part as pins (its restore)."""
    return [parse_pin(label) for label in labels or []]


def skill_version_states(skill: Skill) -> list[str]:
    """`N: draft|approved sha256…` of each version: the skill's configuration history part
    (one query)."""
    versions = SkillVersion.objects.filter(skill=skill).order_by("number")
    return [f"{v.number}: {v.status} {v.sha256[:12]}" for v in versions]


def skill_restore_refused(tenant: Tenant, skill: Skill, changes: dict) -> Skill:
    raise ValidationError(
        "A skill's versions stay as uploaded: pin the version an agent should use instead."
    )


def parse_pin(text: str) -> Pin:
    """`name`, `name@latest` or `name@3`; ValidationError otherwise."""
    name, _, version = str(text).strip().partition("@")
    if not name or len(name) > 64:
        raise ValidationError({"skills": "A skill is named as name, name@latest or name@N."})
    if version in ("", LATEST):
        return Pin(name)
    if not version.isdigit() or len(version) > 9:
        raise ValidationError({"skills": f"“{str(text)[:80]}”: the version is a number or latest."})
    return Pin(name, int(version))
