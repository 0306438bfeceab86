"""A person's memory page in Chromium: reached from the account bar, a fact edited and
deleted, nobody else's shown; axe-core finds nothing serious, the CSP nothing at all."""

from __future__ import annotations

import pytest

from agents.models import Fact
from tests.browser.conftest import assert_accessible
from tests.factories import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_person_reviews_edits_and_deletes_what_agents_remember(trio, axe_tab):
    pal = make_agent(trio.acme, "pal", memory=True)
    fact = Fact.objects.create(tenant=trio.acme, user=trio.bob, agent=pal, text="Likes green tea.")
    Fact.objects.create(tenant=trio.acme, user=trio.alice, text="Alice runs marathons.")
    tab = axe_tab
    tab.login("bob")
    tab.goto("/t/acme/")
    tab.page.get_by_role("link", name="Your memory").click()
    tab.page.wait_for_url("**/t/acme/memory/")
    page = tab.page
    assert page.get_by_role("heading", name="What agents remember about you").is_visible()
    assert "Alice runs" not in page.content()
    assert_accessible(tab, "the memory page")

    page.get_by_text("Edit", exact=True).click()  # the disclosure opens its form
    page.get_by_label("New text").fill("Likes jasmine tea.")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("text=The fact is changed.")
    assert page.locator(".fact-text", has_text="Likes jasmine tea.").is_visible()
    fact.refresh_from_db()
    assert fact.text == "Likes jasmine tea." and fact.edited_by == trio.bob

    page.get_by_role("button", name="Delete this fact").click()
    page.wait_for_selector("text=No agent remembers anything about you here.")
    assert not Fact.objects.filter(pk=fact.pk).exists()
    assert_accessible(tab, "the empty memory page")
    tab.assert_clean()
