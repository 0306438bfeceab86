"""The skills page in a real browser: an admin uploads a skill's zip, approves the version,
pins it on an agent, and the skills page shows the agent using name@version; the upload
and the approval are in the audit log."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from agents.skills import SkillVersion, agent_pin_labels
from tests.factories import make_agent
from tests.web.test_skill_pages import skill_zip

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_uploads_approves_and_pins_a_skill(trio, tab):
    agent = make_agent(trio.acme, "writer", name="Writer")
    tab.login("alice")
    tab.goto("/t/acme/skills/")
    page = tab.page
    page.get_by_label("Skill package (.zip)").set_input_files(
        {"name": "pdf-forms.zip", "mimeType": "application/zip", "buffer": skill_zip()}
    )
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_role("status")).to_contain_text("Installed pdf-forms version 1.")
    page.get_by_role("button", name="Approve pdf-forms version 1").click()
    expect(page.get_by_role("status")).to_contain_text("Approved pdf-forms version 1.")
    assert SkillVersion.objects.get(tenant=trio.acme).status == "approved"

    tab.goto("/t/acme/agents/writer/edit/")
    page.get_by_label("pdf-forms@1", exact=True).check()
    page.get_by_role("button", name="Save").first.click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    assert agent_pin_labels(agent) == ["pdf-forms@1"]

    tab.goto("/t/acme/skills/")
    used = page.locator(".skill-pins")
    expect(used).to_contain_text("Used by: Writer pdf-forms@1")
    expect(used.get_by_role("link", name="Writer")).to_have_attribute(
        "href", "/t/acme/agents/writer/edit/"
    )
    page.screenshot(path="/tmp/skills-page.png", full_page=True)
    tab.screenshot("skills_page")

    tab.goto("/t/acme/audit/")
    expect(page.locator("main")).to_contain_text("pdf-forms@1")
    tab.assert_clean()
