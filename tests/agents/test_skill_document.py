"""Skills in the configuration document (agents/skills/document.py): exported by reference,
imported by reference or with inline files (installed under a zip upload's rules), approval
states and agents' pins round-tripping; a hostile package, a changed version or a withdrawn
approval refused at its path, nothing written; the published schema holding the section."""

from __future__ import annotations

import base64
import io
import json
import zipfile

import pytest
from django.test import Client

from agents.config_document import config_export, config_import
from agents.models import Agent
from agents.runtime.config.document import document_json_schema
from agents.skills import Pin, Skill, SkillVersion, agent_pin_labels, agent_skills_set
from tenancy.models import AuditEntry, ConfigVersion
from tests.agents.test_skills import install, principal, skill_zip
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db


def inline(data: bytes) -> list[dict[str, str]]:
    """A zip's files as a document's inline `files`."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [
            {"path": name, "content_base64": base64.b64encode(archive.read(name)).decode()}
            for name in archive.namelist()
        ]


def document(**sections) -> str:
    return json.dumps({"version": 1, **sections})


@pytest.fixture
def installed(trio):
    """acme: pdf-forms@1 approved, @2 a draft; agent `writer` pins pdf-forms@1."""
    first = install(trio)
    second = install(trio, skill_zip(body="Second."), approve=False)
    agent = make_agent(trio.acme, "writer")
    agent_skills_set(
        tenant=trio.acme,
        by=principal(trio.acme, trio.alice),
        agent=agent,
        pins=[Pin("pdf-forms", 1)],
    )
    return first, second


def test_an_export_names_versions_by_reference_and_imports_again_unchanged(trio, installed):
    first, second = installed
    exported = config_export(tenant=trio.acme)
    assert exported["skills"] == [
        {
            "name": "pdf-forms",
            "versions": [
                {"number": 1, "status": "approved", "sha256": first.sha256},
                {"number": 2, "status": "draft", "sha256": second.sha256},
            ],
        }
    ]
    assert exported["agents"][0]["skills"] == ["pdf-forms@1"]
    plan = config_import(tenant=trio.acme, text=json.dumps(exported))
    assert plan.valid and plan.changes == []


def test_inline_files_install_approve_and_pin_in_another_tenant(trio, installed):
    first, second = installed
    client = login(Client(), trio.alice, tenant=trio.acme)
    exported = client.get("/api/v1/config?skill_files=true").json()
    skills = exported["skills"]
    by_path = lambda files: sorted(files, key=lambda f: f["path"])  # noqa: E731
    assert by_path(skills[0]["versions"][0]["files"]) == by_path(inline(skill_zip()))
    text = document(skills=skills, agents=exported["agents"])

    plan = config_import(tenant=trio.globex, text=text)
    assert plan.valid and plan.applied, plan.as_dict()
    change = next(c for c in plan.changes if c.section == "skills")
    assert change.action == "create" and "files" not in json.dumps(change.as_dict())
    theirs = {v.number: v for v in SkillVersion.objects.filter(tenant=trio.globex)}
    assert (theirs[1].sha256, theirs[1].status) == (first.sha256, "approved")
    assert (theirs[2].sha256, theirs[2].status) == (second.sha256, "draft")
    assert theirs[1].files.count() == 3
    assert agent_pin_labels(Agent.objects.get(tenant=trio.globex, slug="writer")) == ["pdf-forms@1"]
    assert config_export(tenant=trio.globex)["skills"] == config_export(tenant=trio.acme)["skills"]
    assert config_import(tenant=trio.globex, text=text).changes == []  # idempotent
    # Recorded as uploads and approvals are: the audit log and the skill's history.
    actions = set(
        AuditEntry.objects.filter(tenant=trio.globex, object_type="agents.skillversion")
        .values_list("action", flat=True)
    )  # fmt: skip
    assert actions == {"config.created", "config.changed"}
    skill = Skill.objects.get(tenant=trio.globex)
    last = ConfigVersion.objects.filter(object_type="agents.skill", object_id=skill.pk)
    assert last.order_by("number").last().snapshot["parts"]["versions"] == [
        f"1: approved {first.sha256[:12]}",
        f"2: draft {second.sha256[:12]}",
    ]


def test_a_document_may_approve_a_draft_and_pin_it(trio, installed):
    exported = config_export(tenant=trio.acme)
    exported["skills"][0]["versions"][1]["status"] = "approved"
    exported["agents"][0]["skills"] = ["pdf-forms@2"]
    plan = config_import(tenant=trio.acme, text=json.dumps(exported))
    assert plan.applied, plan.as_dict()
    assert SkillVersion.objects.get(tenant=trio.acme, number=2).status == "approved"
    assert agent_pin_labels(Agent.objects.get(tenant=trio.acme, slug="writer")) == ["pdf-forms@2"]


ALIASES = "---\nname: &n pdf-forms\ndescription: *n\n---\nx\n"


@pytest.mark.parametrize(
    ("files", "said"),
    [
        (inline(skill_zip(**{"../escape.md": "x"})), "climbs out of the package"),
        (inline(skill_zip(**{"inner.zip": "PK\x03\x04"})), "archives inside a skill are not"),
        ([{"path": "/etc/passwd", "content_base64": "eA=="}], "absolute paths are not accepted"),
        (
            [{"path": "SKILL.md", "content_base64": base64.b64encode(ALIASES.encode()).decode()}],
            "YAML aliases are not accepted",
        ),
        (inline(skill_zip(name="other")), "names the skill “other”, not “pdf-forms”"),
    ],
)
def test_a_hostile_inline_package_is_refused_at_its_path(trio, files, said):
    text = document(skills=[{"name": "pdf-forms", "versions": [{"number": 1, "files": files}]}])
    plan = config_import(tenant=trio.acme, text=text)
    assert not plan.applied
    assert [(p.path, said in p.reason) for p in plan.problems] == [
        ("skills[0].versions[0].files", True)
    ]
    assert not Skill.objects.filter(tenant=trio.acme).exists()


def test_what_a_document_may_not_do_to_versions(trio, installed):
    first, second = installed
    versions = config_export(tenant=trio.acme)["skills"][0]["versions"]

    def problems(skills) -> list[tuple[str, str]]:
        plan = config_import(tenant=trio.acme, text=document(skills=skills))
        assert not plan.applied
        return [(p.path, p.reason) for p in plan.problems]

    withdrawn = [{**versions[0], "status": "draft"}, versions[1]]
    assert problems([{"name": "pdf-forms", "versions": withdrawn}]) == [
        (
            "skills[0].versions[0].status",
            "version 1 of 'pdf-forms' is approved: an approval is not withdrawn",
        )
    ]
    swapped = [{**versions[0], "sha256": second.sha256}, {**versions[1], "sha256": first.sha256}]
    found = problems([{"name": "pdf-forms", "versions": swapped}])
    assert [path for path, _ in found] == ["skills[0].versions[0]", "skills[0].versions[1]"]
    assert "a version never changes" in found[0][1]
    left_out = problems([{"name": "pdf-forms", "versions": versions[:1]}])
    assert left_out == [
        (
            "skills[0].versions",
            "this tenant holds version(s) 2 of 'pdf-forms' too: a document lists every "
            "version (none is ever deleted)",
        )
    ]
    unknown = problems([{"name": "other", "versions": [versions[0]]}])
    assert unknown[0][0] == "skills[0].versions[0]" and "install it first" in unknown[0][1]
    misnumbered = problems([{"name": "pdf-forms", "versions": [versions[1]]}])
    assert misnumbered[0] == ("skills[0]", "versions are listed in order, numbered 1, 2, 3, …")
    bad_base64 = [{"number": 1, "files": [{"path": "SKILL.md", "content_base64": "@@"}]}]
    assert "not base64" in problems([{"name": "x", "versions": bad_base64}])[0][1]
    assert SkillVersion.objects.filter(tenant=trio.acme).count() == 2  # nothing written


def test_a_prune_never_deletes_a_skill(trio, installed):
    plan = config_import(tenant=trio.acme, text=document(), prune=True)
    assert plan.valid
    assert not [c for c in plan.changes if c.section == "skills"]
    assert Skill.objects.filter(tenant=trio.acme).count() == 1


def test_an_agent_may_not_pin_a_draft_of_the_document(trio):
    files = inline(skill_zip())
    text = document(
        skills=[{"name": "pdf-forms", "versions": [{"number": 1, "files": files}]}],
        agents=[{"slug": "w", "name": "W", "skills": ["pdf-forms@1"]}],
    )
    plan = config_import(tenant=trio.acme, text=text)
    assert [p.path for p in plan.problems] == ["agents[0].skills[0]"]


def test_the_published_schema_holds_the_skills_section():
    schema = document_json_schema()
    assert schema["properties"]["skills"]["items"] == {"$ref": "#/$defs/SkillEntry"}
    version = schema["$defs"]["SkillVersionEntry"]["properties"]
    assert {"number", "status", "sha256", "files"} <= set(version)
