"""A tenant's skills: each upload a numbered version, with its files as rows; an agent's
pins. Imported by `agents.models` so Django finds them (app label `agents`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tenancy.models import Tenant


class SkillStatus(models.TextChoices):
    DRAFT = "draft", "Draft"  # uploaded, not usable by agents until approved
    APPROVED = "approved", "Approved"


class Skill(models.Model):
    """A skill by its name (the `name` of its SKILL.md), unique in its tenant. Its
    description is its latest version's."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="skills")
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="agents_skill_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class SkillVersion(models.Model):
    """One uploaded package of a skill, never changed afterwards (an approval aside).
    Identical content is one version (`sha256` of the files, unique per skill)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    description = models.TextField()
    instructions = models.TextField(blank=True)  # SKILL.md after its front matter
    front_matter = models.JSONField(default=dict)
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    status = models.CharField(max_length=10, choices=SkillStatus.choices, default=SkillStatus.DRAFT)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["skill", "number"]
        constraints = [
            models.UniqueConstraint(fields=["skill", "number"], name="agents_skillversion_number"),
            models.UniqueConstraint(fields=["skill", "sha256"], name="agents_skillversion_content"),
        ]

    def __str__(self) -> str:
        return f"{self.skill.name}@{self.number}"


class SkillFile(models.Model):
    """A file of a version, SKILL.md included, by its path in the skill's folder. Stored as
    a row: a package is small (package.Limits) and is written with its version in one
    transaction."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    version = models.ForeignKey(SkillVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=255)
    content = models.BinaryField()
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="agents_skillfile_path")
        ]

    def __str__(self) -> str:
        return self.path


class AgentSkill(models.Model):
    """An agent's pin of a skill: a version, or (`version` empty) its latest approved one."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="skill_pins")
    skill = models.ForeignKey(Skill, on_delete=models.RESTRICT, related_name="pins")
    version = models.ForeignKey(
        SkillVersion, null=True, blank=True, on_delete=models.RESTRICT, related_name="pins"
    )

    class Meta:
        ordering = ["skill__name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "skill"], name="agents_agentskill_unique")
        ]

    def __str__(self) -> str:
        return f"{self.skill.name}@{self.version.number if self.version else 'latest'}"
