"""Skills in the configuration document (its `skills` section: the format in
agents/runtime/config/skill_entries.py, docs/skills.md): what an export writes of a skill,
what an import may not do, and the import's writes.

An export names each version by reference (number, status, sha256): small, and the same
on every export; asked to (`skill_files`), it adds each version's files inline, for a
document that installs them in another tenant. An import takes a version by reference —
the tenant must hold that version with that content — or with its files inline, which
installs it through `skill_import` after the checks a zip upload gets. A version is never
changed nor deleted, and an approval never withdrawn, so a document that asks for either
is refused, at the version's path, before anything is written. An import never deletes a
skill (not even pruning): agents' pins and runs' records name its versions.
"""

from __future__ import annotations

import base64
from typing import Any

from django.core.exceptions import ValidationError

from agents.runtime.config.compiler import ConfigProblem
from agents.runtime.config.skill_entries import SkillFileEntry
from agents.skills.models import Skill, SkillFile, SkillStatus, SkillVersion
from agents.skills.package import Limits, PackageRefused, SkillPackage, read_files
from agents.skills.services import skill_import, skill_version_approve
from tenancy.models import Tenant
from tenancy.policy import Principal


def skill_version_entries(skill: Skill) -> list[dict[str, Any]]:
    """A skill's versions as an export writes them (with `versions` prefetched: no query)."""
    return [
        {"number": v.number, "status": v.status, "sha256": v.sha256}
        for v in sorted(skill.versions.all(), key=lambda v: v.number)
    ]


def skill_files_inline(tenant: Tenant, entries: list[dict[str, Any]]) -> None:
    """Add each version's `files` (base64) to an export's skill entries, in place: a
    document that installs the same skills in another tenant. One query."""
    files: dict[tuple[str, int], list[dict[str, str]]] = {}
    rows = SkillFile.objects.filter(tenant=tenant).order_by("version__skill__name", "path")
    for name, number, path, content in rows.values_list(
        "version__skill__name", "version__number", "path", "content"
    ):
        encoded = base64.b64encode(bytes(content)).decode()
        files.setdefault((name, number), []).append({"path": path, "content_base64": encoded})
    for entry in entries:
        for version in entry["versions"]:
            version["files"] = files.get((entry["name"], version["number"]), [])


def skill_entry_compared(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as a plan compares and shows it: its versions without their files (their
    digest says the same, and a plan never carries a package's bytes)."""
    versions = [
        {key: value for key, value in version.items() if key != "files"}
        for version in entry.get("versions", [])
    ]
    return {**entry, "versions": versions}


def _package(name: str, files: list[dict[str, Any]]) -> SkillPackage:
    """The package of a document version's inline files (already valid base64: the
    document's own check). PackageRefused as a zip upload's."""
    given = [(f["path"], SkillFileEntry.model_validate(f).content()) for f in files]
    package = read_files(given, Limits())
    if package.name != name:
        raise PackageRefused(f"SKILL.md names the skill “{package.name}”, not “{name}”.")
    return package


def skill_document_problems(tenant: Tenant, entries: list[dict[str, Any]]) -> list[ConfigProblem]:
    """Why the document's skills cannot be applied as they stand, at their paths: a
    reference to a version the tenant does not hold, a version given other content than
    it has, an approval withdrawn, a version left out, a package a zip upload would have
    refused. Two queries, and each inline package read."""
    names = [entry["name"] for entry in entries]
    held: dict[str, dict[int, SkillVersion]] = {name: {} for name in names}
    for version in SkillVersion.objects.filter(tenant=tenant, skill__name__in=names).only(
        "number", "status", "sha256", "skill__name"
    ).select_related("skill"):  # fmt: skip
        held[version.skill.name][version.number] = version
    problems: list[ConfigProblem] = []
    for index, entry in enumerate(entries):
        name, own = entry["name"], held.get(entry["name"], {})
        versions = entry["versions"]
        if len(versions) < len(own):
            missing = ", ".join(str(n) for n in sorted(own) if n > len(versions))
            problems.append(
                ConfigProblem(
                    f"skills[{index}].versions",
                    f"this tenant holds version(s) {missing} of {name!r} too: a document "
                    "lists every version (none is ever deleted)",
                )
            )
        digests = {v.sha256: v.number for v in own.values()}
        for position, version in enumerate(versions):
            path = f"skills[{index}].versions[{position}]"
            problems += _version_problems(path, name, version, own, digests)
    return problems


def _version_problems(
    path: str,
    name: str,
    version: dict[str, Any],
    own: dict[int, SkillVersion],
    digests: dict[str, int],
) -> list[ConfigProblem]:
    number, stored = version["number"], own.get(version["number"])
    if version.get("files") is not None:
        try:
            _package(name, version["files"])
        except PackageRefused as exc:
            return [ConfigProblem(f"{path}.files", str(exc))]
    if stored is None:
        if version.get("files") is None:
            return [
                ConfigProblem(
                    path,
                    f"this tenant has no version {number} of {name!r}: give its files, or "
                    "install it first (a zip on the skills page, REST or `manage.py skills "
                    "import`), then import again",
                )
            ]
        if version["sha256"] in digests:
            return [
                ConfigProblem(
                    path, f"this content is version {digests[version['sha256']]} of {name!r}"
                )
            ]
        return []
    if stored.sha256 != version["sha256"]:
        return [
            ConfigProblem(
                path,
                f"version {number} of {name!r} here has other content (sha256 "
                f"{stored.sha256[:12]}…): a version never changes; add a new one",
            )
        ]
    if stored.status == SkillStatus.APPROVED and version["status"] != SkillStatus.APPROVED:
        return [
            ConfigProblem(
                f"{path}.status",
                f"version {number} of {name!r} is approved: an approval is not withdrawn",
            )
        ]
    return []


def skill_document_save(
    *,
    tenant: Tenant,
    skill: Skill | None,
    changes: dict[str, Any],
    graph_checked: bool,
    versions: list[dict[str, Any]],
    by: Principal | None,
) -> Skill:
    """Install the versions the tenant lacks and approve those the document approves, in
    order (`skill_document_problems` found nothing to refuse first). Each install and
    approval records its audit entry and the skill's history, as on the page."""
    name = changes["name"]
    for version in versions:
        stored = None
        if skill is not None:
            stored = SkillVersion.objects.filter(skill=skill, number=version["number"]).first()
        if stored is None:
            try:
                package = _package(name, version.get("files") or [])
            except PackageRefused as exc:
                raise ValidationError({"versions": str(exc)}) from None
            stored, _ = skill_import(tenant=tenant, by=by, package=package)
            skill = stored.skill
            if stored.number != version["number"]:
                raise ValidationError(
                    {"versions": f"version {version['number']} would be {stored.number} here"}
                )
        if version["status"] == SkillStatus.APPROVED and stored.status != SkillStatus.APPROVED:
            skill_version_approve(tenant=tenant, by=by, version=stored)
    if skill is None:
        raise ValidationError({"versions": "a skill is installed with at least one version"})
    return skill


def skill_document_delete(*, tenant: Tenant, skill: Skill, by: Principal | None) -> None:
    raise ValidationError("An import never deletes a skill.")  # not pruned (DocSection)
