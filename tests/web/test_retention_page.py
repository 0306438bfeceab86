"""The Retention page: owners and admins see and change the days kept, place and lift legal
holds; bad values are shown beside their field with nothing saved; members get 403,
outsiders 404."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Conversation
from lifecycle.models import LegalHold, RetentionPolicy
from tests.factories import login

pytestmark = pytest.mark.django_db
URL = "/t/acme/retention/"


def test_an_owner_sets_the_days_and_sees_them_in_effect(client: Client, trio, settings):
    settings.RETENTION_AUDIT_DAYS = 365
    login(client, trio.alice)
    page = client.get(URL).content.decode()
    assert "Retention" in page and "365 days" in page
    response = client.post(
        URL, {"run_days": "30", "conversation_days": "0", "attachment_days": "", "audit_days": ""}
    )
    assert response.status_code == 302
    policy = RetentionPolicy.objects.get(tenant=trio.acme)
    assert (policy.run_days, policy.conversation_days, policy.audit_days) == (30, 0, None)
    page = client.get(URL).content.decode()
    assert "30 days" in page and "forever" in page


def test_a_bad_value_is_shown_beside_its_field_and_nothing_is_saved(client: Client, trio):
    login(client, trio.alice)
    for bad in ("-3", "soon", "99999999"):
        response = client.post(URL, {"run_days": bad})
        assert response.status_code == 400
        assert 'class="field has-error"' in response.content.decode()
    assert not RetentionPolicy.objects.exists()


def test_a_conversation_is_held_then_lifted(client: Client, trio):
    conversation = Conversation.objects.create(tenant=trio.acme, owner_user=trio.bob)
    theirs = Conversation.objects.create(tenant=trio.globex, owner_user=trio.charlie)
    login(client, trio.alice)
    held = client.post(URL + "holds/", {"conversation": conversation.pk, "reason": "case 7"})
    assert held.status_code == 302
    assert f"Conversation {conversation.pk}: case 7" in client.get(URL).content.decode()
    assert client.post(URL + "holds/", {"conversation": theirs.pk}).status_code == 404
    assert client.post(URL + "holds/", {"conversation": "x"}).status_code == 400
    assert client.post(f"{URL}holds/{conversation.pk}/lift/").status_code == 302
    assert not LegalHold.objects.exists()


def test_members_are_refused_and_outsiders_see_nothing(client: Client, trio):
    login(client, trio.bob)
    assert client.get(URL).status_code == 403
    assert client.post(URL, {"run_days": "1"}).status_code == 403
    login(client, trio.charlie)
    assert client.get(URL).status_code == 404
    assert not RetentionPolicy.objects.exists()
