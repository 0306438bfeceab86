"""Skills (agents/skills/): versions on upload, approval through the policy, agents' pins,
the audit log and configuration history, and a run that loads a skill and reads its file
against the fake model server, its record naming name@version."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.test import Client

from agents.models import RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.skills import (
    Pin,
    SkillStatus,
    SkillVersion,
    agent_pin_labels,
    agent_skills_set,
    agent_usable_skills,
    skill_import,
    skill_package_read,
    skill_version_approve,
)
from tenancy.models import AuditEntry, ConfigVersion, Membership, Role
from tenancy.policy import Principal
from tests.factories import add_member, login, make_agent, make_user
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db


def skill_zip(name: str = "pdf-forms", body: str = "Fill the form.", **extra: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(
            "SKILL.md",
            f"---\nname: {name}\ndescription: Fill in PDF forms.\n---\n{body}\n",
        )
        archive.writestr("references/fields.md", "# Fields\nName goes first.")
        archive.writestr("scripts/fill.py", "print('never run on the host')")
        for path, content in extra.items():
            archive.writestr(path, content)
    return out.getvalue()


def principal(tenant, user) -> Principal:
    return Principal.of_membership(Membership.objects.get(tenant=tenant, user=user))


def install(trio, data: bytes | None = None, approve: bool = True) -> SkillVersion:
    admin = principal(trio.acme, trio.alice)
    version, _ = skill_import(
        tenant=trio.acme, by=admin, package=skill_package_read(data or skill_zip())
    )
    if approve:
        skill_version_approve(tenant=trio.acme, by=admin, version=version)
    return version


def test_each_upload_is_a_new_version_and_identical_content_the_same(trio):
    admin = principal(trio.acme, trio.alice)
    first, made = skill_import(tenant=trio.acme, by=admin, package=skill_package_read(skill_zip()))
    again, made_again = skill_import(
        tenant=trio.acme, by=admin, package=skill_package_read(skill_zip())
    )
    second, _ = skill_import(
        tenant=trio.acme, by=admin, package=skill_package_read(skill_zip(body="Changed."))
    )
    assert (first.number, made) == (1, True)
    assert (again.pk, made_again) == (first.pk, False)
    assert second.number == 2 and second.status == SkillStatus.DRAFT
    assert sorted(first.files.values_list("path", flat=True)) == [
        "SKILL.md",
        "references/fields.md",
        "scripts/fill.py",
    ]


def test_a_refused_package_is_a_validation_error_naming_the_file():
    with pytest.raises(ValidationError) as refused:
        skill_package_read(skill_zip(**{"../x.md": "x"}))
    assert "../x.md" in str(refused.value.message_dict["file"])


def test_only_admins_install_and_approve(trio):
    member = principal(trio.acme, trio.bob)
    package = skill_package_read(skill_zip())
    with pytest.raises(PermissionDenied):
        skill_import(tenant=trio.acme, by=member, package=package)
    version = install(trio, approve=False)
    with pytest.raises(PermissionDenied):
        skill_version_approve(tenant=trio.acme, by=member, version=version)
    version.refresh_from_db()
    assert version.status == SkillStatus.DRAFT


def test_another_tenants_version_and_agent_answer_404(trio):
    version = install(trio, approve=False)
    outsider = principal(trio.globex, trio.charlie)
    with pytest.raises(Http404):
        skill_version_approve(tenant=trio.globex, by=outsider, version=version)
    theirs = make_agent(trio.globex, "spy")
    with pytest.raises(ValidationError, match="No skill named"):
        agent_skills_set(tenant=trio.globex, by=outsider, agent=theirs, pins=[Pin("pdf-forms")])
    with pytest.raises(Http404):
        agent_skills_set(
            tenant=trio.globex, by=outsider, agent=make_agent(trio.acme, "ours"), pins=[]
        )


def test_only_approved_versions_are_pinned_and_used(trio):
    agent = make_agent(trio.acme, "writer")
    admin = principal(trio.acme, trio.alice)
    draft = install(trio, approve=False)
    with pytest.raises(ValidationError, match="no approved version yet"):
        agent_skills_set(tenant=trio.acme, by=admin, agent=agent, pins=[Pin("pdf-forms")])
    with pytest.raises(ValidationError, match="no approved version 1"):
        agent_skills_set(tenant=trio.acme, by=admin, agent=agent, pins=[Pin("pdf-forms", 1)])
    skill_version_approve(tenant=trio.acme, by=admin, version=draft)
    agent_skills_set(tenant=trio.acme, by=admin, agent=agent, pins=[Pin("pdf-forms")])
    install(trio, skill_zip(body="v2"), approve=False)  # a newer draft: not used
    assert [s.label for s in agent_usable_skills(agent)] == ["pdf-forms@1"]
    install(trio, skill_zip(body="v3"))  # approved: "latest" follows it
    assert [s.label for s in agent_usable_skills(agent)] == ["pdf-forms@3"]
    agent_skills_set(tenant=trio.acme, by=admin, agent=agent, pins=[Pin("pdf-forms", 1)])
    assert [s.label for s in agent_usable_skills(agent)] == ["pdf-forms@1"]


def test_installs_approvals_and_pins_are_in_the_audit_log_and_history(trio):
    agent = make_agent(trio.acme, "writer")
    version = install(trio)
    agent_skills_set(
        tenant=trio.acme, by=principal(trio.acme, trio.alice), agent=agent, pins=[Pin("pdf-forms")]
    )
    entries = AuditEntry.objects.filter(tenant=trio.acme).order_by("id")
    kinds = [(e.action, e.object_type) for e in entries]
    assert ("config.created", "agents.skillversion") in kinds
    assert ("config.changed", "agents.skillversion") in kinds
    pinned = entries.filter(object_type="agents.agent").last()
    assert pinned.changes == {"skills": [[], ["pdf-forms@latest"]]}
    assert pinned.actor_label and "alice" in pinned.actor_label
    skill_history = ConfigVersion.objects.filter(object_type="agents.skill").order_by("number")
    assert skill_history.last().snapshot["parts"]["versions"] == [
        f"1: approved {version.sha256[:12]}"
    ]
    agent_history = ConfigVersion.objects.filter(object_type="agents.agent", object_id=agent.pk)
    assert agent_history.order_by("number").last().snapshot["parts"]["skills"] == [
        "pdf-forms@latest"
    ]
    assert agent_pin_labels(agent) == ["pdf-forms@latest"]


def test_a_run_loads_a_skill_reads_its_file_and_records_it(trio, agent, provider_server):
    version = install(trio)
    agent_skills_set(
        tenant=trio.acme, by=principal(trio.acme, trio.alice), agent=agent, pins=[Pin("pdf-forms")]
    )
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "load_skill", '{"name": "pdf-forms"}')]),
        ToolCallReply(
            [ToolCall("c2", "read_skill_file", '{"skill": "pdf-forms", "path": "../SKILL.md"}')]
        ),
        ToolCallReply(
            [
                ToolCall(
                    "c3",
                    "read_skill_file",
                    '{"skill": "pdf-forms", "path": "references/fields.md"}',
                )
            ]
        ),
        TextReply("Name first."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="Fill my form", initiated_by=trio.bob)
    assert execute_run(run.pk) == "succeeded"
    requests = provider_server.requests_to("/v1/chat/completions")
    first = requests[0].body
    system = first["messages"][0]["content"]
    assert "pdf-forms: Fill in PDF forms." in system
    assert "Fill the form." not in system  # instructions only through load_skill
    assert {"load_skill", "read_skill_file"} <= {t["function"]["name"] for t in first["tools"]}
    loaded = requests[1].body["messages"][-1]["content"]
    assert "Fill the form." in loaded
    outside = requests[2].body["messages"][-1]["content"]
    assert "has no file" in outside
    read = requests[3].body["messages"][-1]["content"]
    assert "Name goes first." in read
    recorded = RunEvent.objects.get(run=run, type="run.skills").payload
    assert recorded == {"skills": [f"pdf-forms@{version.number}"]}
    assert json.dumps(recorded) == '{"skills": ["pdf-forms@1"]}'
    page = login(Client(), trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()

    assert "<code>pdf-forms@1</code>" in page  # the run's record page


def test_an_agent_without_skills_is_given_no_skill_tools(trio, agent, provider_server):
    provider_server.script("openai", TextReply("Hi."))
    run = run_start(tenant=trio.acme, agent=agent, input="Hi", initiated_by=trio.bob)
    assert execute_run(run.pk) == "succeeded"
    body = provider_server.requests_to("/v1/chat/completions")[0].body
    assert "load_skill" not in json.dumps(body)
    assert not RunEvent.objects.filter(run=run, type="run.skills").exists()


def test_an_admin_of_another_tenant_is_refused(trio):
    dora = make_user("dora")
    add_member(trio.globex, dora, Role.ADMIN)
    with pytest.raises(Http404):
        skill_import(
            tenant=trio.acme,
            by=principal(trio.globex, dora),
            package=skill_package_read(skill_zip()),
        )


def test_the_command_installs_a_folder_and_refuses_a_bad_one(trio, tmp_path):
    from django.core.management import CommandError, call_command

    folder = tmp_path / "pdf-forms"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: pdf-forms\ndescription: Forms.\n---\nDo it.\n")
    out = io.StringIO()
    call_command("skills", "import", "--tenant", "acme", str(folder), "--approve", stdout=out)
    assert out.getvalue().strip() == "pdf-forms@1: installed version (approved)."
    archive = tmp_path / "pdf-forms.zip"
    archive.write_bytes(skill_zip())
    out = io.StringIO()
    call_command("skills", "import", "--tenant", "acme", str(archive), stdout=out)
    assert out.getvalue().strip() == "pdf-forms@2: installed version (draft)."
    (folder / "SKILL.md").write_text("no front matter")
    with pytest.raises(CommandError, match=r"SKILL\.md: it must begin with front matter"):
        call_command("skills", "import", "--tenant", "acme", str(folder))
    with pytest.raises(CommandError, match="No tenant"):
        call_command("skills", "import", "--tenant", "nope", str(folder))
    assert AuditEntry.objects.filter(tenant=trio.acme, actor_label="system").exists()


# -- the configuration document ------------------------------------------------------------
def test_the_document_exports_and_imports_an_agents_pins(trio):
    from agents.config_document import config_export, config_import
    from agents.runtime.config.loading import dump_document

    writer = make_agent(trio.acme, "writer")
    install(trio)
    admin = principal(trio.acme, trio.alice)
    agent_skills_set(tenant=trio.acme, by=admin, agent=writer, pins=[Pin("pdf-forms", 1)])
    exported = config_export(tenant=trio.acme)
    entry = next(a for a in exported["agents"] if a["slug"] == "writer")
    assert entry["skills"] == ["pdf-forms@1"]

    entry["skills"] = ["pdf-forms@latest"]
    plan = config_import(tenant=trio.acme, text=dump_document(exported, "yaml"))
    assert plan.valid and plan.applied, plan.as_dict()
    assert [(c.section, c.name, list(c.fields)) for c in plan.changes] == [
        ("agents", "writer", ["skills"])
    ]
    assert agent_pin_labels(writer) == ["pdf-forms@latest"]

    # Another tenant has not installed the skill (the document names its version by
    # reference, as an export does): a problem, nothing is applied.
    refused = config_import(tenant=trio.globex, text=dump_document(exported, "yaml"))
    assert not refused.applied
    problems = {p.path: p.reason for p in refused.problems}
    assert "this tenant has no version 1 of 'pdf-forms'" in problems["skills[0].versions[0]"]
    del exported["skills"]  # without the section: the pin itself is the problem
    refused = config_import(tenant=trio.globex, text=dump_document(exported, "yaml"))
    problems = {p.path: p.reason for p in refused.problems}
    index = [a["slug"] for a in exported["agents"]].index("writer")
    assert (
        "no installed, approved skill version 'pdf-forms@latest'"
        in problems[f"agents[{index}].skills[0]"]
    )
    for pins, reason in (
        (["pdf-forms@2"], "no installed, approved skill version 'pdf-forms@2'"),
        (["pdf-forms@1", "pdf-forms@latest"], "skill 'pdf-forms' is named twice"),
        (["Not A Pin"], "should match pattern"),
    ):
        entry["skills"] = pins
        bad = config_import(tenant=trio.acme, text=dump_document(exported, "yaml"))
        assert not bad.applied and reason in " ".join(p.reason for p in bad.problems)
    assert agent_pin_labels(writer) == ["pdf-forms@latest"]


def test_a_tenant_with_skills_and_pins_can_be_deleted(trio):
    agent = make_agent(trio.acme, "writer")
    install(trio)
    agent_skills_set(
        tenant=trio.acme, by=principal(trio.acme, trio.alice), agent=agent, pins=[Pin("pdf-forms")]
    )
    trio.acme.delete()
    assert not SkillVersion.objects.exists()
