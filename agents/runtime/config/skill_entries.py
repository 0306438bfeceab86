"""The configuration document's `skills` section (docs/skills.md, "In the configuration
document"): each installed skill by name with every one of its versions, in order — a
version by reference (its number, status and content digest: the version this tenant holds)
or with its files inline (base64), which installs it. No Django here: whether a reference
names a version the tenant holds, and whether inline files make an acceptable package (the
rules of a zip upload), is checked on import by `agents.skills`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SKILL_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
VERSIONS_MAX = 100
FILES_MAX = 200  # agents.skills.Limits().files; sizes: the package's limits, on import
BASE64_MAX = 1_400_000  # a 1 MB file's base64 (the document itself is at most 1 MB)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SkillFileEntry(_Strict):
    path: str = Field(
        min_length=1, max_length=255, description="Its path in the skill's folder: SKILL.md."
    )
    content_base64: str = Field(max_length=BASE64_MAX, description="Its bytes, base64.")

    def content(self) -> bytes:
        return base64.b64decode(self.content_base64, validate=True)


class SkillVersionEntry(_Strict):
    """A version: by reference (`sha256`), or with its `files`, which install it when the
    tenant does not hold it (their digest, computed, must equal `sha256` if both are given)."""

    number: int = Field(ge=1, le=999_999_999)
    status: Literal["draft", "approved"] = Field(
        "draft", description="approved: agents may use it (an approval is never withdrawn)."
    )
    sha256: str | None = Field(
        None, pattern=SHA256_PATTERN, description="Its content digest, as REST shows it."
    )
    files: list[SkillFileEntry] | None = Field(
        None,
        max_length=FILES_MAX,
        description="Its files, SKILL.md among them; checked as a zip upload's are.",
    )

    @model_validator(mode="after")
    def _digest(self) -> SkillVersionEntry:
        if self.files is None:
            if self.sha256 is None:
                raise ValueError("give the version's sha256 (a reference) or its files")
            return self
        digests: dict[str, str] = {}
        for entry in self.files:
            if entry.path in digests:
                raise ValueError(f"the file {entry.path[:255]!r} is given twice")
            try:
                digests[entry.path] = hashlib.sha256(entry.content()).hexdigest()
            except (binascii.Error, ValueError):
                raise ValueError(f"{entry.path[:255]!r}: content_base64 is not base64") from None
        whole = package_digest(digests)
        if self.sha256 is not None and self.sha256 != whole:
            raise ValueError(f"the files' digest is {whole}, not the sha256 given")
        self.sha256 = whole
        return self


class SkillEntry(_Strict):
    """An installed skill and its versions, numbered 1, 2, … in order (every one: a
    version is never deleted)."""

    name: str = Field(pattern=SKILL_NAME_PATTERN, max_length=64)
    versions: list[SkillVersionEntry] = Field(min_length=1, max_length=VERSIONS_MAX)

    @model_validator(mode="after")
    def _numbered(self) -> SkillEntry:
        numbers = [version.number for version in self.versions]
        if numbers != list(range(1, len(numbers) + 1)):
            raise ValueError("versions are listed in order, numbered 1, 2, 3, …")
        return self


def package_digest(digests: dict[str, str]) -> str:
    """A package's digest from its files' (path -> sha256): as agents.skills.package
    computes a version's `sha256`."""
    whole = hashlib.sha256()
    for path, digest in sorted(digests.items()):
        whole.update(f"{path}\0{digest}\n".encode())
    return whole.hexdigest()


def approved_pins(skills: list[SkillEntry]) -> frozenset[str]:
    """What agents may pin of the document's skills: name@latest and name@N of each
    approved version."""
    pins: set[str] = set()
    for skill in skills:
        for version in skill.versions:
            if version.status == "approved":
                pins |= {f"{skill.name}@latest", f"{skill.name}@{version.number}"}
    return frozenset(pins)
