"""The skills page (Config → Skills): upload a zip, see its versions, approve one; a bad
package shown on the form with a 400; the agent form's skill picker; admins only, another
tenant's skill 404."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import Agent
from agents.skills import SkillVersion, agent_pin_labels
from tests.factories import login
from tests.web.test_config import agent_data, url

pytestmark = pytest.mark.django_db


def skill_zip(body: str = "Fill the form.", **extra: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("SKILL.md", f"---\nname: pdf-forms\ndescription: Forms.\n---\n{body}\n")
        for path, content in extra.items():
            archive.writestr(path, content)
    return out.getvalue()


def upload(client, data: bytes):
    return client.post(url("skills"), {"file": SimpleUploadedFile("s.zip", data)})


def test_an_admin_uploads_approves_and_pins_a_skill(client, trio):
    login(client, trio.alice)
    response = upload(client, skill_zip())
    assert response.status_code == 302
    page = client.get(url("skills")).content.decode()
    assert "pdf-forms" in page and "Forms." in page and "Approve" in page
    approve = url("skill_approve", name="pdf-forms", number=1)
    assert client.get(approve).status_code == 405
    assert client.post(approve).status_code == 302
    version = SkillVersion.objects.get(skill__name="pdf-forms")
    assert version.status == "approved"
    history = client.get(url("history", kind="skills", pk=version.skill_id))
    assert history.status_code == 200 and "approved" in history.content.decode()
    restore = client.post(
        url("history_restore", kind="skills", pk=version.skill_id, number=1), follow=True
    )
    assert "cannot be restored: A skill" in restore.content.decode()
    assert SkillVersion.objects.get().status == "approved"  # a skill is never restored
    form = client.get(url("agent_create")).content.decode()
    assert 'value="pdf-forms@latest"' in form and 'value="pdf-forms@1"' in form
    created = client.post(url("agent_create"), agent_data(skills=["pdf-forms@1"]))
    assert created.status_code == 302, created.content.decode()[:2000]
    agent = Agent.objects.get(tenant=trio.acme, slug="support")
    assert agent_pin_labels(agent) == ["pdf-forms@1"]
    listed = client.get(url("skills")).content.decode()
    assert "Used by:" in listed and "<code>pdf-forms@1</code>" in listed
    assert f'href="{url("agent_edit", slug="support")}"' in listed
    both = client.post(
        url("agent_edit", slug="support"),
        agent_data(skills=["pdf-forms@1", "pdf-forms@latest"], instructions="Changed."),
    )
    assert both.status_code == 400 and "named twice" in both.content.decode()
    agent.refresh_from_db()
    assert agent.instructions == "Be kind."  # nothing saved


def test_a_bad_package_is_shown_on_the_form_and_nothing_is_stored(client, trio):
    login(client, trio.alice)
    response = upload(client, skill_zip(**{"../evil.md": "x"}))
    assert response.status_code == 400
    assert "../evil.md" in response.content.decode()
    assert not SkillVersion.objects.exists()
    assert upload(client, b"not a zip").status_code == 400


def test_members_get_403_and_other_tenants_404(client, trio):
    login(client, trio.alice)
    upload(client, skill_zip())
    login(client, trio.bob)  # a member of acme
    assert client.get(url("skills")).status_code == 403
    assert client.post(url("skill_approve", name="pdf-forms", number=1)).status_code == 403
    login(client, trio.charlie)  # globex's owner
    assert client.post(url("skill_approve", name="pdf-forms", number=1)).status_code == 404
    theirs = url("skill_approve", name="pdf-forms", number=1).replace("/t/acme/", "/t/globex/")
    assert client.post(theirs).status_code == 404
    assert SkillVersion.objects.get().status == "draft"
