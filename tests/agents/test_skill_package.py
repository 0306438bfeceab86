"""Reading a skill package (agents/skills/package.py): the format's rules, and every hostile
package refused with a message naming the file. The hostile zips are built here."""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import pytest

from agents.skills import Limits, PackageRefused, read_folder, read_zip

SKILL_MD = """---
name: pdf-forms
description: Fill in PDF forms. Use when the user gives a form to complete.
license: MIT
metadata:
  author: acme
---
# Filling forms

Read references/fields.md first.
"""


def make_zip(files: dict[str, bytes | str], *, prefix: str = "") -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, content in files.items():
            archive.writestr(prefix + path, content)
    return out.getvalue()


def refused(data: bytes, limits: Limits | None = None) -> str:
    with pytest.raises(PackageRefused) as error:
        read_zip(data, limits or Limits())
    return str(error.value)


def test_it_reads_a_skill_at_the_root():
    package = read_zip(
        make_zip({"SKILL.md": SKILL_MD, "references/fields.md": "# Fields", "scripts/x.py": "1"})
    )
    assert package.name == "pdf-forms"
    assert package.description.startswith("Fill in PDF forms")
    assert package.instructions.startswith("# Filling forms")
    assert package.front_matter["metadata"] == {"author": "acme"}
    assert [f.path for f in package.files] == ["SKILL.md", "references/fields.md", "scripts/x.py"]
    assert len(package.sha256) == 64


def test_a_zip_of_the_folder_is_unwrapped_and_its_name_must_be_the_skills():
    package = read_zip(make_zip({"SKILL.md": SKILL_MD, "a.md": "a"}, prefix="pdf-forms/"))
    assert [f.path for f in package.files] == ["SKILL.md", "a.md"]
    message = refused(make_zip({"SKILL.md": SKILL_MD}, prefix="other/"))
    assert "SKILL.md" in message and "“other”" in message


def test_identical_content_has_the_same_digest_and_a_change_another():
    one = read_zip(make_zip({"SKILL.md": SKILL_MD, "a.md": "a"}))
    again = read_zip(make_zip({"a.md": "a", "SKILL.md": SKILL_MD}, prefix="pdf-forms/"))
    other = read_zip(make_zip({"SKILL.md": SKILL_MD, "a.md": "b"}))
    assert one.sha256 == again.sha256 != other.sha256


@pytest.mark.parametrize(
    "path",
    ["../evil.md", "a/../../evil.md", "/etc/passwd", "C:/x.md", "a\\..\\b.md", "a//b.md", "a/./b"],
)
def test_it_refuses_paths_that_climb_or_are_absolute(path):
    message = refused(make_zip({"SKILL.md": SKILL_MD, path: "x"}))
    assert "path" in message


def test_it_refuses_a_control_character_in_a_name():
    assert "control character" in refused(make_zip({"SKILL.md": SKILL_MD, "a\x01.md": "x"}))


def test_it_refuses_symbolic_links():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("SKILL.md", SKILL_MD)
        link = zipfile.ZipInfo("references/passwd")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    assert refused(out.getvalue()) == "references/passwd: symbolic links are not accepted."


def test_it_refuses_a_zip_bomb_by_counting_bytes_not_trusting_declared_sizes():
    bomb = make_zip({"SKILL.md": SKILL_MD, "big.txt": b"\0" * (3 * 1024 * 1024)})
    assert len(bomb) < 50_000
    assert "big.txt: larger than 1 MB" in refused(bomb)
    # A lying header: declared small, inflates large. Patch the declared size in both the
    # local header and the central directory.
    lying = bytearray(bomb)
    real = (3 * 1024 * 1024).to_bytes(4, "little")
    count = lying.count(real)
    assert count == 2
    lying = bytes(lying).replace(real, (10).to_bytes(4, "little"))
    message = refused(lying)
    assert "big.txt" in message


def test_it_refuses_a_package_over_its_total():
    files = {"SKILL.md": SKILL_MD, **{f"f{i}.txt": b"x" * 600 for i in range(4)}}
    assert "larger than 2 KB" in refused(make_zip(files), Limits(total_bytes=2048))


def test_it_refuses_too_many_files():
    files = {"SKILL.md": SKILL_MD, **{f"f{i}.txt": "x" for i in range(5)}}
    assert "more than 3 files" in refused(make_zip(files), Limits(files=3))


def test_it_refuses_a_zip_inside_the_package():
    inner = make_zip({"a.txt": "a"})
    assert "archives inside" in refused(make_zip({"SKILL.md": SKILL_MD, "assets/x.bin": inner}))


def test_it_refuses_an_archive_too_large_and_one_that_is_no_zip():
    assert "larger than" in refused(b"PK" + bytes(5000), Limits(archive_bytes=1024))
    assert refused(b"not a zip") == "The upload is not a readable zip archive."


def test_it_refuses_duplicate_names():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("SKILL.md", SKILL_MD)
        archive.writestr("a.md", "1")
        with pytest.warns(UserWarning):
            archive.writestr("a.md", "2")
    assert "a.md: the archive holds this name twice" in refused(out.getvalue())


def test_it_leaves_out_archivers_junk():
    package = read_zip(
        make_zip({"SKILL.md": SKILL_MD, "__MACOSX/._SKILL.md": "x", "a/.DS_Store": "x"})
    )
    assert [f.path for f in package.files] == ["SKILL.md"]


@pytest.mark.parametrize(
    ("skill_md", "expected"),
    [
        (None, "No SKILL.md"),
        ("no front matter", "must begin with front matter"),
        ("---\nname: a\n", "no closing"),
        ("---\n- a list\n---\n", "must be a mapping"),
        ("---\nname: a: b\n---\n", "not valid YAML (line 2)"),
        (
            "---\nname: x\ndescription: y\nversion: 2\n---\n",
            "unknown front matter field(s) version",
        ),
        ("---\nname: Bad_Name\ndescription: y\n---\n", "“name” must be"),
        ("---\nname: -bad\ndescription: y\n---\n", "“name” must be"),
        ("---\nname: a--b\ndescription: y\n---\n", "“name” must be"),
        ("---\nname: " + "a" * 65 + "\ndescription: y\n---\n", "“name” must be"),
        ("---\nname: ok\n---\n", "“description” is required"),
        ("---\nname: ok\ndescription: " + "d" * 1025 + "\n---\n", "longer than 1024"),
        ("---\nname: ok\ndescription: d\nmetadata: {a: [1]}\n---\n", "“metadata” must map"),
        ("---\nname: ok\ndescription: d\nallowed-tools: [a]\n---\n", "“allowed-tools”"),
        ("---\nname: ok\ndescription: d\nlicense: " + "l" * 501 + "\n---\n", "“license”"),
        ("---\na: &x [1]\nb: *x\n---\n", "aliases are not accepted (line 3)"),
        ("---\nname: ok\ndescription: " + "d" * 17000 + "\n---\n", "longer than 16 KB"),
        ("---\nname: !!python/object:os.system x\ndescription: d\n---\n", "not valid YAML"),
    ],
)
def test_it_refuses_malformed_front_matter(skill_md, expected):
    files: dict[str, bytes | str] = {"other.md": "x"}
    if skill_md is not None:
        files["SKILL.md"] = skill_md
    message = refused(make_zip(files))
    assert expected in message
    if skill_md is not None:
        assert message.startswith("SKILL.md: ")


def test_it_refuses_a_skill_md_that_is_not_utf8():
    assert refused(make_zip({"SKILL.md": "---\nname: é\n---".encode("latin-1")})) == (
        "SKILL.md: not UTF-8 text."
    )


def test_it_reads_a_folder_named_as_the_skill(tmp_path: Path):
    folder = tmp_path / "pdf-forms"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL_MD)
    (folder / "references" / "fields.md").write_text("# Fields")
    package = read_folder(folder)
    assert [f.path for f in package.files] == ["SKILL.md", "references/fields.md"]
    assert (
        package.sha256
        == read_zip(make_zip({"SKILL.md": SKILL_MD, "references/fields.md": "# Fields"})).sha256
    )


def test_a_folder_refuses_symbolic_links_and_a_wrong_name(tmp_path: Path):
    folder = tmp_path / "pdf-forms"
    folder.mkdir()
    (folder / "SKILL.md").write_text(SKILL_MD)
    os.symlink("/etc/passwd", folder / "passwd")
    with pytest.raises(PackageRefused, match="passwd: symbolic links are not accepted"):
        read_folder(folder)
    (folder / "passwd").unlink()
    renamed = folder.rename(tmp_path / "other")
    with pytest.raises(PackageRefused, match="not the folder's"):
        read_folder(renamed)
