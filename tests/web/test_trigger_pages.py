"""The trigger pages (agentplatform/web/config/triggers.py): admins only; a webhook's
secret on the answer that made it only; enable/disable and rotate; a real run started by a
webhook, executed, and its answer on the trigger's page."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from agents.models import Run, Trigger
from agents.runs.engine import execute_run
from agents.runtime.triggers import sign
from tests.factories import login, make_agent
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db

SCHEDULE = {
    "name": "morning", "kind": "schedule", "target": "agent:reporter", "cron": "0 7 * * *",
    "timezone": "Europe/Paris", "input_template": "Good morning", "enabled": "on",
}  # fmt: skip


@pytest.fixture
def reporter(trio):
    return make_agent(trio.acme, "reporter")


def test_an_admin_creates_a_schedule_and_sees_its_page(client, trio, reporter):
    login(client, trio.alice)
    assert client.get("/t/acme/triggers/").status_code == 200
    assert client.get("/t/acme/triggers/new/").status_code == 200
    made = client.post("/t/acme/triggers/new/", {**SCHEDULE, "run_as": trio.alice.pk})
    assert made.status_code == 302, made.content.decode()[:2000]
    trigger = Trigger.objects.get(name="morning")
    assert made["Location"] == f"/t/acme/triggers/{trigger.pk}/"
    page = client.get(made["Location"]).content.decode()
    assert "0 7 * * *" in page and "Europe/Paris" in page and "No runs yet" in page
    listed = client.get("/t/acme/triggers/").content.decode()
    assert "morning" in listed and "Triggers" in listed


def test_bad_schedules_are_shown_on_the_form(client, trio, reporter):
    login(client, trio.alice)
    bad = client.post(
        "/t/acme/triggers/new/", {**SCHEDULE, "cron": "* * * * *", "run_as": trio.alice.pk}
    )
    assert bad.status_code == 400 and "more often" in bad.content.decode()
    bad = client.post(
        "/t/acme/triggers/new/", {**SCHEDULE, "timezone": "Mars/Base", "run_as": trio.alice.pk}
    )
    assert bad.status_code == 400 and "time zone" in bad.content.decode()
    assert not Trigger.objects.exists()


def test_a_webhooks_secret_is_shown_once_and_rotating_shows_a_new_one(client, trio, reporter):
    login(client, trio.alice)
    made = client.post(
        "/t/acme/triggers/new/",
        {**SCHEDULE, "kind": "webhook", "cron": "", "input_template": "{{payload.text}}",
         "run_as": trio.alice.pk},
    )  # fmt: skip
    assert made.status_code == 200
    trigger = Trigger.objects.get()
    assert (
        trigger.secret in made.content.decode() and "shown only this once" in made.content.decode()
    )
    assert f"/hooks/{trigger.public_id}" in made.content.decode()
    page = client.get(f"/t/acme/triggers/{trigger.pk}/").content.decode()
    assert trigger.secret not in page
    rotated = client.post(f"/t/acme/triggers/{trigger.pk}/rotate/")
    trigger.refresh_from_db()
    assert rotated.status_code == 200 and trigger.secret in rotated.content.decode()
    assert "no-cache" in rotated["Cache-Control"] or "no-store" in rotated["Cache-Control"]


def test_disable_enable_edit_and_delete(client, trio, reporter):
    login(client, trio.alice)
    client.post("/t/acme/triggers/new/", {**SCHEDULE, "run_as": trio.alice.pk})
    trigger = Trigger.objects.get()
    client.post(f"/t/acme/triggers/{trigger.pk}/enabled/", {})
    trigger.refresh_from_db()
    assert not trigger.enabled and trigger.next_fire_at is None
    client.post(f"/t/acme/triggers/{trigger.pk}/enabled/", {"enabled": "on"})
    trigger.refresh_from_db()
    assert trigger.enabled and trigger.next_fire_at is not None
    form = client.get(f"/t/acme/triggers/{trigger.pk}/edit/").content.decode()
    assert "0 7 * * *" in form
    edited = client.post(
        f"/t/acme/triggers/{trigger.pk}/edit/",
        {**SCHEDULE, "cron": "15 8 * * 1", "run_as": trio.alice.pk, "kind": "webhook"},
    )
    assert edited.status_code == 302
    trigger.refresh_from_db()
    assert trigger.cron == "15 8 * * 1" and trigger.kind == "schedule"  # the kind stays
    assert client.post(f"/t/acme/triggers/{trigger.pk}/delete/").status_code == 302
    assert not Trigger.objects.exists()


def test_members_get_403_outsiders_404_and_anonymous_the_login(client, trio, reporter):
    login(client, trio.alice)
    client.post("/t/acme/triggers/new/", {**SCHEDULE, "run_as": trio.alice.pk})
    trigger = Trigger.objects.get()
    paths = [
        "/t/acme/triggers/", "/t/acme/triggers/new/", f"/t/acme/triggers/{trigger.pk}/",
        f"/t/acme/triggers/{trigger.pk}/edit/", f"/t/acme/triggers/{trigger.pk}/delete/",
    ]  # fmt: skip
    for user, status in ((trio.bob, 403), (trio.charlie, 404)):
        other = login(Client(), user)
        for path in paths:
            assert other.get(path).status_code == status, path
        assert other.post(f"/t/acme/triggers/{trigger.pk}/rotate/").status_code == status
        assert other.post(f"/t/acme/triggers/{trigger.pk}/enabled/").status_code == status
    for path in paths:
        assert Client().get(path).status_code == 302
    # charlie's own tenant does not reach acme's trigger either
    globex = login(Client(), trio.charlie)
    assert globex.get(f"/t/globex/triggers/{trigger.pk}/").status_code == 404
    assert Trigger.objects.get().enabled


@pytest.mark.django_db(transaction=True)
def test_a_webhook_starts_a_real_run_whose_answer_is_on_the_triggers_page(
    client, trio, agent, provider_server
):
    provider_server.script("openai", TextReply("Ticket 7 triaged: billing."))
    login(client, trio.alice)
    made = client.post(
        "/t/acme/triggers/new/",
        {"name": "tickets", "kind": "webhook", "target": "agent:assistant", "timezone": "UTC",
         "input_template": "Triage ticket {{payload.id}}: {{payload.subject}}",
         "run_as": trio.alice.pk, "enabled": "on"},
    )  # fmt: skip
    assert made.status_code == 200, made.content.decode()[:2000]
    trigger = Trigger.objects.get()
    body = json.dumps({"id": 7, "subject": "Invoice wrong"}).encode()
    timestamp = str(int(time.time()))
    delivered = Client().post(
        f"/hooks/{trigger.public_id}", body, content_type="application/json",
        HTTP_X_TRIGGER_TIMESTAMP=timestamp,
        HTTP_X_TRIGGER_SIGNATURE=sign(trigger.secret, timestamp, body),
    )  # fmt: skip
    assert delivered.status_code == 202, delivered.content
    run_id = delivered.json()["run"]
    execute_run(run_id)  # here, unless the session's worker took it already: then wait
    deadline = time.monotonic() + 30
    while not (run := Run.objects.get(pk=run_id)).is_terminal and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.status == "succeeded" and run.input == "Triage ticket 7: Invoice wrong"
    page = client.get(f"/t/acme/triggers/{trigger.pk}/").content.decode()
    assert f"#{run_id}<" in page and "Ticket 7 triaged: billing." in page
    assert trigger.secret not in page


def test_a_triggered_runs_page_names_its_trigger(client, trio, reporter):
    from datetime import timedelta

    from django.utils import timezone

    from agents.triggers import fire_due_triggers

    login(client, trio.alice)
    client.post("/t/acme/triggers/new/", {**SCHEDULE, "run_as": trio.alice.pk})
    trigger = Trigger.objects.get()
    Trigger.objects.filter(pk=trigger.pk).update(next_fire_at=timezone.now() - timedelta(1))
    fire_due_triggers()
    run = Run.objects.get(trigger=trigger)
    page = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert f'href="/t/acme/triggers/{trigger.pk}/">morning</a>' in page
