"""Reading a skill package (the open Agent Skills format) from a zip or a folder, safely.

A skill is a folder holding `SKILL.md` — YAML front matter (`name`, `description`; optional
`license`, `compatibility`, `allowed-tools`, `metadata`) between `---` lines, then Markdown
instructions — and any other files (`scripts/`, `references/`, `assets/`). A zip holds that
folder's content at its root, or the folder itself as its one top-level directory (whose
name must then be the skill's, as the format says).

Everything in a package is hostile. Refused, each with a message naming the file: a path
that is absolute, climbs (`..`), uses backslashes or control characters, or is too deep or
long; a symbolic link or other non-regular file; an encrypted zip entry; a zip inside the
package; a duplicate name; more files than `Limits.files`; a file over `Limits.file_bytes`
or a package over `Limits.total_bytes` — counted while decompressing, never trusting the
sizes a zip declares (zip bombs); a `SKILL.md` that is missing, not UTF-8, without front
matter, with front matter that is not a bounded YAML mapping (no aliases), or whose fields
break the format's rules. No Django here: the caller passes the limits.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SKILL_FILE = "SKILL.md"
NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
FRONT_MATTER_MAX = 16 * 1024
PATH_MAX = 255
DEPTH_MAX = 8
FIELDS = ("name", "description", "license", "compatibility", "allowed-tools", "metadata")
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_PATH_BAD = re.compile(r"[\x00-\x1f\x7f\\]")
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
# What archivers add beside the content; left out, never stored.
_JUNK = ("__MACOSX/",)
_JUNK_NAMES = (".DS_Store",)
_CHUNK = 64 * 1024


class PackageRefused(ValueError):
    """The package is refused; the message says which file and why, for the uploader."""


@dataclass(frozen=True)
class Limits:
    files: int = 200
    file_bytes: int = 1024 * 1024
    total_bytes: int = 5 * 1024 * 1024
    archive_bytes: int = 10 * 1024 * 1024  # the zip as uploaded


@dataclass(frozen=True)
class PackageFile:
    path: str  # relative to the skill's folder, with "/" separators
    content: bytes
    sha256: str

    @property
    def size(self) -> int:
        return len(self.content)


@dataclass(frozen=True)
class SkillPackage:
    name: str
    description: str
    instructions: str  # SKILL.md after its front matter
    front_matter: dict[str, Any]  # the fields as given (only those of FIELDS)
    files: tuple[PackageFile, ...] = field(default=())  # every file, SKILL.md included
    sha256: str = ""  # of the whole content: identical uploads have the same

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def read_zip(data: bytes, limits: Limits = Limits()) -> SkillPackage:
    """The skill in the zip archive `data`. Raises PackageRefused."""
    if len(data) > limits.archive_bytes:
        raise PackageRefused(f"The archive is larger than {_size(limits.archive_bytes)}.")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise PackageRefused("The upload is not a readable zip archive.") from None
    files: dict[str, bytes] = {}
    total = 0
    with archive:
        for info in entries:
            raw = info.filename
            if raw.startswith(_JUNK) or raw.rsplit("/", 1)[-1] in _JUNK_NAMES:
                continue
            path = _safe_path(raw.rstrip("/") if info.is_dir() else raw)
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind == stat.S_IFLNK:
                raise PackageRefused(f"{path}: symbolic links are not accepted.")
            if info.is_dir():
                continue
            if kind not in (0, stat.S_IFREG):
                raise PackageRefused(f"{path}: only regular files are accepted.")
            if info.flag_bits & 0x1:
                raise PackageRefused(f"{path}: encrypted files are not accepted.")
            if path in files:
                raise PackageRefused(f"{path}: the archive holds this name twice.")
            if len(files) >= limits.files:
                raise PackageRefused(f"The package holds more than {limits.files} files.")
            content = _read_member(archive, info, path, limits, total)
            total += len(content)
            files[path] = content
    return _package(_unwrap(files), limits)


def read_folder(root: str | os.PathLike[str], limits: Limits = Limits()) -> SkillPackage:
    """The skill in the folder `root` (its name must be the skill's). Symbolic links inside
    are refused, never followed. Raises PackageRefused."""
    base = Path(root)
    if base.is_symlink() or not base.is_dir():
        raise PackageRefused(f"{base.name or root}: not a folder.")
    files: dict[str, bytes] = {}
    total = 0
    pending = [base]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as listing:
            for entry in sorted(listing, key=lambda e: e.name):
                path = _safe_path(Path(entry.path).relative_to(base).as_posix())
                if entry.name in _JUNK_NAMES:
                    continue
                if entry.is_symlink():
                    raise PackageRefused(f"{path}: symbolic links are not accepted.")
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise PackageRefused(f"{path}: only regular files are accepted.")
                if len(files) >= limits.files:
                    raise PackageRefused(f"The package holds more than {limits.files} files.")
                with open(entry.path, "rb") as handle:
                    content = _bounded_read(handle, path, limits, total)
                total += len(content)
                files[path] = content
    return _package(files, limits, folder_name=base.resolve().name)


def read_files(files: list[tuple[str, bytes]], limits: Limits = Limits()) -> SkillPackage:
    """The skill whose files are given as (path in its folder, bytes) — a configuration
    document's — under a zip's rules: the same paths, counts, sizes and SKILL.md refused.
    Raises PackageRefused."""
    checked: dict[str, bytes] = {}
    total = 0
    for raw, content in files:
        path = _safe_path(raw)
        if path in checked:
            raise PackageRefused(f"{path}: the package holds this name twice.")
        if len(checked) >= limits.files:
            raise PackageRefused(f"The package holds more than {limits.files} files.")
        checked[path] = _bounded_read(io.BytesIO(content), path, limits, total)
        total += len(content)
    return _package(checked, limits)


def _read_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, limits: Limits, total: int
) -> bytes:
    # The declared size is only a first check: the bytes are counted as they come.
    if info.file_size > limits.file_bytes:
        raise PackageRefused(f"{path}: larger than {_size(limits.file_bytes)}.")
    if total + info.file_size > limits.total_bytes:
        raise PackageRefused(f"The package is larger than {_size(limits.total_bytes)}.")
    try:
        with archive.open(info) as member:
            return _bounded_read(member, path, limits, total)
    except PackageRefused:
        raise
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, OSError, RuntimeError):
        raise PackageRefused(f"{path}: could not be decompressed.") from None


def _bounded_read(stream: Any, path: str, limits: Limits, total: int) -> bytes:
    chunks: list[bytes] = []
    read = 0
    while chunk := stream.read(_CHUNK):
        read += len(chunk)
        if read > limits.file_bytes:
            raise PackageRefused(f"{path}: larger than {_size(limits.file_bytes)}.")
        if total + read > limits.total_bytes:
            raise PackageRefused(f"The package is larger than {_size(limits.total_bytes)}.")
        chunks.append(chunk)
    content = b"".join(chunks)
    if content.startswith(_ZIP_MAGIC) or path.lower().endswith(".zip"):
        raise PackageRefused(f"{path}: archives inside a skill are not accepted.")
    return content


def _safe_path(raw: str) -> str:
    """`raw` as a relative path inside the package, or PackageRefused."""
    shown = _PATH_BAD.sub("?", raw)[:PATH_MAX]
    if not raw or len(raw) > PATH_MAX:
        raise PackageRefused(f"{shown or '(empty name)'}: the path is empty or too long.")
    if _PATH_BAD.search(raw):
        raise PackageRefused(f"{shown}: the path holds a backslash or a control character.")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        raise PackageRefused(f"{shown}: absolute paths are not accepted.")
    parts = raw.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise PackageRefused(f"{shown}: the path climbs out of the package or is not plain.")
    if len(parts) > DEPTH_MAX:
        raise PackageRefused(f"{shown}: nested deeper than {DEPTH_MAX} folders.")
    return raw


def _unwrap(files: dict[str, bytes]) -> dict[str, bytes]:
    """A zip of the skill's folder: its content, keyed `<folder>/...`, is moved to the root
    (the folder's name kept under the key "" for the name check)."""
    if SKILL_FILE in files or not files:
        return files
    tops = {path.split("/", 1)[0] for path in files}
    if len(tops) != 1 or any("/" not in path for path in files):
        return files
    (top,) = tops
    unwrapped = {path.split("/", 1)[1]: content for path, content in files.items()}
    return {**unwrapped, "": top.encode()}


def _package(files: dict[str, bytes], limits: Limits, folder_name: str = "") -> SkillPackage:
    if "" in files:
        folder_name = files.pop("").decode()
    if SKILL_FILE not in files:
        raise PackageRefused(
            f"No {SKILL_FILE} at the package's root (nor in its one top-level folder)."
        )
    try:
        text = files[SKILL_FILE].decode("utf-8")
    except UnicodeDecodeError:
        raise PackageRefused(f"{SKILL_FILE}: not UTF-8 text.") from None
    front, instructions = _split_front_matter(text.removeprefix("\ufeff"))
    fields = _front_matter_fields(front)
    if folder_name and folder_name != fields["name"]:
        raise PackageRefused(
            f"{SKILL_FILE}: the name “{fields['name']}” is not the folder's, “{folder_name}”."
        )
    stored = tuple(
        PackageFile(path, content, hashlib.sha256(content).hexdigest())
        for path, content in sorted(files.items())
    )
    whole = hashlib.sha256()
    for item in stored:
        whole.update(f"{item.path}\0{item.sha256}\n".encode())
    return SkillPackage(
        name=fields["name"],
        description=fields["description"],
        instructions=instructions,
        front_matter=fields,
        files=stored,
        sha256=whole.hexdigest(),
    )


def _split_front_matter(text: str) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n") != "---":
        raise PackageRefused(f"{SKILL_FILE}: it must begin with front matter between “---” lines.")
    for index, line in enumerate(lines[1:], start=1):
        if line.rstrip("\r\n") == "---":
            front = "".join(lines[1:index])
            if len(front.encode()) > FRONT_MATTER_MAX:
                raise PackageRefused(
                    f"{SKILL_FILE}: the front matter is longer than {_size(FRONT_MATTER_MAX)}."
                )
            return front, "".join(lines[index + 1 :]).strip("\n")
    raise PackageRefused(f"{SKILL_FILE}: the front matter has no closing “---” line.")


class _Loader(yaml.SafeLoader):
    """The safe loader without aliases (a few lines of them can expand to gigabytes)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            line = self.peek_event().start_mark.line + 2  # +1 for 1-based, +1 for the "---"
            raise PackageRefused(f"{SKILL_FILE}: YAML aliases are not accepted (line {line}).")
        return super().compose_node(parent, index)


def _front_matter_fields(front: str) -> dict[str, Any]:
    try:
        data = yaml.load(front, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except PackageRefused:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise PackageRefused(f"{SKILL_FILE}: the front matter is not valid YAML{where}.") from None
    except (ValueError, RecursionError):
        raise PackageRefused(f"{SKILL_FILE}: the front matter is not valid YAML.") from None
    if not isinstance(data, dict):
        raise PackageRefused(f"{SKILL_FILE}: the front matter must be a mapping of fields.")
    unknown = sorted(str(key) for key in data if key not in FIELDS)
    if unknown:
        raise PackageRefused(
            f"{SKILL_FILE}: unknown front matter field(s) {', '.join(unknown)[:200]}; "
            f"the format's are {', '.join(FIELDS)}."
        )
    name = data.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not _NAME.match(name):
        raise PackageRefused(
            f"{SKILL_FILE}: “name” must be 1 to {NAME_MAX} lowercase letters, digits and single "
            "hyphens, neither first nor last."
        )
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise PackageRefused(f"{SKILL_FILE}: “description” is required (text).")
    if len(description) > DESCRIPTION_MAX:
        raise PackageRefused(
            f"{SKILL_FILE}: “description” is longer than {DESCRIPTION_MAX} characters."
        )
    for key, most in (("license", 500), ("compatibility", COMPATIBILITY_MAX)):
        if key in data and (not isinstance(data[key], str) or len(data[key]) > most):
            raise PackageRefused(
                f"{SKILL_FILE}: “{key}” must be text of at most {most} characters."
            )
    if "allowed-tools" in data and not isinstance(data["allowed-tools"], str):
        raise PackageRefused(
            f"{SKILL_FILE}: “allowed-tools” must be text (names, space-separated)."
        )
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise PackageRefused(f"{SKILL_FILE}: “metadata” must map text keys to text values.")
    return {key: data[key] for key in FIELDS if key in data}


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MB" if n >= 1024 * 1024 else f"{n // 1024} KB"
