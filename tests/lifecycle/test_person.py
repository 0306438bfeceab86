"""A person's data (lifecycle/person.py) over REST (agentplatform/api/offboarding_api.py)
and the pages (agentplatform/web/offboarding.py): a member downloads their own
conversations, facts and runs, nobody else's; an admin erases a person from the tenant —
conversations, facts, files gone, runs anonymised with their cost kept, audited — and
nothing of anyone else; another tenant's person is a 404, hostile input a clear 4xx.

acme: alice (owner), bob (member, the person); globex: charlie.
"""

from __future__ import annotations

import io
import json
import zipfile
from decimal import Decimal

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents.conversations import attachment_upload
from agents.models import Attachment, Conversation, Fact, Message, Run, RunEvent
from tenancy import services as tenancy
from tenancy.models import AuditEntry, Membership
from tests.factories import login, make_agent
from tests.lifecycle.tenant_data import PNG

pytestmark = pytest.mark.django_db


def held_by(tenant, user, word: str) -> Run:
    agent = make_agent(tenant, f"agent-{word}")
    conversation = Conversation.objects.create(tenant=tenant, agent=agent, owner_user=user)
    run = Run.objects.create(
        tenant=tenant, agent=agent, conversation=conversation, initiated_by_user=user,
        input=f"{word} asks", output=f"{word} answer", correlation_id=f"corr-{word}",
        input_tokens=7, output_tokens=3, cost_usd=Decimal("0.02"), status="succeeded",
    )  # fmt: skip
    RunEvent.objects.create(tenant=tenant, run=run, seq=1, type="text.delta", payload={"t": word})
    Message.objects.create(tenant=tenant, conversation=conversation, role="user", content=word)
    Fact.objects.create(tenant=tenant, user=user, text=f"{word} likes tea")
    attachment_upload(tenant=tenant, conversation=conversation, by=user, name="a.png", data=PNG)
    return run


@pytest.fixture
def people(trio):
    return {
        "bob": held_by(trio.acme, trio.bob, "bobword"),
        "alice": held_by(trio.acme, trio.alice, "aliceword"),
        "charlie": held_by(trio.globex, trio.charlie, "charlieword"),
    }


def unzip(content: bytes) -> dict[str, bytes]:
    archive = zipfile.ZipFile(io.BytesIO(content))
    return {name: archive.read(name) for name in archive.namelist()}


def test_a_member_downloads_their_own_data_and_nobody_elses(trio, people):
    answer = login(APIClient(), trio.bob, tenant="acme").get("/api/v1/me/export")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/zip"
    files = unzip(b"".join(answer.streaming_content))
    everything = b"".join(files.values())
    assert b"bobword" in everything and b"aliceword" not in everything
    assert b"charlieword" not in everything
    manifest = json.loads(files["manifest.json"])
    assert manifest["counts"] == {
        "conversations": 1, "facts": 1, "runs": 1, "run_events": 1, "attachments": 1, "files": 1,
    }  # fmt: skip
    (conversation,) = [json.loads(x) for x in files["conversations.jsonl"].splitlines()]
    assert [m["content"] for m in conversation["messages"]] == ["bobword"]
    assert PNG in files.values()


def test_the_page_offers_the_same_download(trio, people):
    client = login(Client(), trio.bob)
    assert b"my-data-download" in client.get("/t/acme/my-data/").content
    answer = client.get("/t/acme/my-data/download/")
    assert answer.status_code == 200
    assert b"bobword" in b"".join(unzip(b"".join(answer.streaming_content)).values())


def test_an_api_key_holds_no_persons_data(trio, people):
    _, secret = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read"])
    answer = APIClient().get("/api/v1/me/export", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 400 and "An API key holds no person" in answer.content.decode()


def assert_erased(trio, run: Run) -> None:
    assert not Conversation.objects.filter(tenant=trio.acme, owner_user=trio.bob).exists()
    assert not Fact.objects.filter(tenant=trio.acme, user=trio.bob).exists()
    assert not Attachment.objects.filter(tenant=trio.acme, uploaded_by_user=trio.bob).exists()
    assert not Membership.objects.filter(tenant=trio.acme, user=trio.bob).exists()
    run.refresh_from_db()
    assert (run.input, run.output, run.initiated_by_user_id) == ("", "", None)
    assert (run.cost_usd, run.input_tokens) == (Decimal("0.02"), 7)  # usage stays
    assert not RunEvent.objects.filter(run=run).exists()


def assert_untouched(trio, people) -> None:
    for name, tenant in (("alice", trio.acme), ("charlie", trio.globex)):
        run = Run.objects.get(pk=people[name].pk)
        assert run.output == f"{name}word answer" and run.events.count() == 1
        assert Fact.objects.filter(tenant=tenant, text=f"{name}word likes tea").exists()
        assert Attachment.objects.filter(tenant=tenant, conversation=run.conversation).exists()


def test_an_admin_erases_a_person_over_rest_audited(trio, people):
    client = login(APIClient(), trio.alice, tenant="acme")
    answer = client.post(f"/api/v1/people/{trio.bob.pk}/erasure", {"confirm": True}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"conversations": 1, "facts": 1, "attachments": 1, "runs_anonymised": 1}
    assert_erased(trio, people["bob"])
    assert_untouched(trio, people)
    entry = AuditEntry.objects.filter(tenant=trio.acme, details__erased_person=trio.bob.pk).get()
    assert entry.user == trio.alice and entry.details["erased"]["runs_anonymised"] == 1
    again = client.post(f"/api/v1/people/{trio.bob.pk}/erasure", {"confirm": True}, format="json")
    assert again.status_code == 404  # nothing of bob is left to find


@pytest.mark.parametrize(
    "body", [{}, {"confirm": False}, {"confirm": "maybe"}, []], ids=["none", "false", "odd", "list"]
)
def test_an_unconfirmed_or_malformed_request_is_a_400_and_erases_nothing(trio, people, body):
    client = login(APIClient(), trio.alice, tenant="acme")
    answer = client.post(f"/api/v1/people/{trio.bob.pk}/erasure", body, format="json")
    assert answer.status_code == 400
    assert Fact.objects.filter(tenant=trio.acme, user=trio.bob).exists()
    assert Membership.objects.filter(tenant=trio.acme, user=trio.bob).exists()


def test_another_tenants_person_or_a_bad_id_is_a_404_and_a_member_a_403(trio, people):
    client = login(APIClient(), trio.alice, tenant="acme")
    for user_id in (trio.charlie.pk, "abc", 10**12):
        answer = client.post(f"/api/v1/people/{user_id}/erasure", {"confirm": True}, format="json")
        assert answer.status_code == 404, user_id
    member = login(APIClient(), trio.bob, tenant="acme")
    path = f"/api/v1/people/{trio.alice.pk}/erasure"
    assert member.post(path, {"confirm": True}, format="json").status_code == 403
    assert_untouched(trio, people)


def test_an_admin_erases_a_person_on_the_page_after_typing_the_confirmation(trio, people):
    client = login(Client(), trio.alice)
    page = f"/t/acme/people/{trio.bob.pk}/erase/"
    assert b"Erase bob" in client.get(page).content
    refused = client.post(page, {"confirm": "yes"})
    assert refused.status_code == 400 and b"erasure-error" in refused.content
    assert Fact.objects.filter(tenant=trio.acme, user=trio.bob).exists()
    done = client.post(page, {"confirm": "erase"})
    assert done.status_code == 302
    assert_erased(trio, people["bob"])
    assert_untouched(trio, people)
    assert client.get(f"/t/acme/people/{trio.charlie.pk}/erase/").status_code == 404
