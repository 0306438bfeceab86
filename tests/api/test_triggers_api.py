"""REST for triggers (agentplatform/api/triggers_api.py): per role and scope, across
tenants, bad input a 400 naming the field; a webhook's secret only in the answer that made
it; the runs a trigger started."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Run, Trigger
from agents.triggers import fire_due_triggers
from tenancy.models import Role
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import add_member, login, make_agent, make_user

pytestmark = pytest.mark.django_db

SCHEDULE = {
    "name": "report", "kind": "schedule", "agent": "analyst", "cron": "0 9 * * 1-5",
    "timezone": "Europe/Berlin", "input_template": "Summarise {{fired_at}}",
}  # fmt: skip
WEBHOOK = {
    "name": "issues", "kind": "webhook", "agent": "analyst",
    "input_template": "Triage: {{payload.issue.title}}",
}  # fmt: skip


@pytest.fixture
def analyst(trio):
    return make_agent(trio.acme, "analyst")


def session(user, tenant="acme") -> Api:
    return Api(login(Client(), user), tenant_header=tenant)


def test_an_admin_creates_reads_changes_and_deletes_triggers(trio, analyst):
    api = session(trio.alice)
    made = api.post("/triggers", SCHEDULE)
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["secret"] is None and body["hook_url"] is None and body["run_as"] == "alice"
    assert body["next_fire_at"] is not None and body["agent"] == "analyst"
    trigger_id = body["id"]
    hook = api.post("/triggers", WEBHOOK).json()
    assert hook["secret"].startswith("whsec_") and hook["hook_url"].startswith("/hooks/trg_")
    listed = api.get("/triggers").json()["results"]
    assert {t["name"] for t in listed} == {"report", "issues"}
    detail = api.get(f"/triggers/{hook['id']}")
    assert "secret" not in detail.json()
    rotated = api.post(f"/triggers/{hook['id']}/rotate-secret")
    assert rotated.status_code == 200 and rotated.json()["secret"] != hook["secret"]
    later = [api.get("/triggers"), api.get(f"/triggers/{hook['id']}")]
    for response in later:  # the secrets are in the answers that made them only
        text = response.content.decode()
        assert hook["secret"] not in text and rotated.json()["secret"] not in text

    off = api.patch(f"/triggers/{trigger_id}", {"enabled": False})
    assert off.status_code == 200 and off.json()["enabled"] is False
    assert off.json()["next_fire_at"] is None
    on = api.patch(f"/triggers/{trigger_id}", {"enabled": True, "cron": "30 7 * * *"})
    assert on.json()["next_fire_at"] is not None and on.json()["cron"] == "30 7 * * *"
    assert api.delete(f"/triggers/{trigger_id}").status_code == 204
    assert not Trigger.objects.filter(pk=trigger_id).exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "* * * * *"}, "cron"),
        ({"cron": "0 9 * *"}, "cron"),
        ({"timezone": "Atlantis/Capital"}, "timezone"),
        ({"agent": "nobody"}, "agent"),
        ({"agent": "Not A Slug"}, "agent"),
        ({"input_template": "{{payload.x}}"}, "input_template"),
        ({"run_as": "charlie"}, "run_as"),  # not a member of acme
        ({"kind": "sometimes"}, "kind"),
        ({"name": "a\x00b"}, "name"),
        ({"surprise": 1}, "surprise"),
        ({"cron": ""}, "cron"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(trio, analyst, change, field):
    error = assert_error(session(trio.alice).post("/triggers", {**SCHEDULE, **change}), 400)
    assert field in error["details"], error
    assert not Trigger.objects.exists()


def test_a_trigger_keeps_its_kind_and_a_schedule_has_no_secret(trio, analyst):
    api = session(trio.alice)
    trigger_id = api.post("/triggers", SCHEDULE).json()["id"]
    assert_error(api.patch(f"/triggers/{trigger_id}", {"kind": "webhook"}), 400)
    assert_error(api.post(f"/triggers/{trigger_id}/rotate-secret"), 400)
    assert_error(api.post("/triggers", {"name": "x"}), 400)  # kind and input missing


def test_members_and_viewers_read_but_do_not_write(trio, analyst):
    trigger_id = session(trio.alice).post("/triggers", SCHEDULE).json()["id"]
    vera = make_user("vera")
    add_member(trio.acme, vera, Role.VIEWER)
    for user in (trio.bob, vera):
        api = session(user)
        assert api.get("/triggers").status_code == 200
        assert api.get(f"/triggers/{trigger_id}").status_code == 200
        assert_error(api.post("/triggers", {**SCHEDULE, "name": "mine"}), 403)
        assert_error(api.patch(f"/triggers/{trigger_id}", {"enabled": False}), 403)
        assert_error(api.post(f"/triggers/{trigger_id}/rotate-secret"), 403)
        assert_error(api.delete(f"/triggers/{trigger_id}"), 403)
    assert Trigger.objects.get(pk=trigger_id).enabled


def test_keys_need_the_config_scope_to_write(client, trio, analyst):
    reader = as_key(client, trio.acme, "read")
    assert_error(reader.post("/triggers", SCHEDULE), 403)
    writer = as_key(client, trio.acme, "read", "config")
    made = writer.post("/triggers", {**SCHEDULE, "run_as": "bob"})
    assert made.status_code == 201, made.content
    assert made.json()["run_as"] == "bob"
    # A key has no user to attribute runs to by default.
    assert (
        "run_as"
        in assert_error(writer.post("/triggers", {**SCHEDULE, "name": "n"}), 400)["details"]
    )


def test_other_tenants_and_anonymous_callers_reach_nothing(client, trio, analyst):
    trigger_id = session(trio.alice).post("/triggers", SCHEDULE).json()["id"]
    outsider = session(trio.charlie)  # names acme, is not a member
    assert_error(outsider.get(f"/triggers/{trigger_id}"), 404)
    theirs = as_key(client, trio.globex, "read", "config", "admin")
    assert theirs.get("/triggers").json()["results"] == []
    for call in (
        theirs.get(f"/triggers/{trigger_id}"),
        theirs.patch(f"/triggers/{trigger_id}", {"enabled": False}),
        theirs.post(f"/triggers/{trigger_id}/rotate-secret"),
        theirs.get(f"/triggers/{trigger_id}/runs"),
        theirs.delete(f"/triggers/{trigger_id}"),
        theirs.get("/triggers/99999999999999999999"),
    ):
        assert_error(call, 404)
    anonymous = Client().get("/api/v1/triggers")
    assert anonymous.status_code in (401, 403)
    assert Trigger.objects.get(pk=trigger_id).enabled


def test_a_triggers_runs_are_listed_as_runs_are_seen(trio, analyst):
    api = session(trio.alice)
    trigger_id = api.post("/triggers", SCHEDULE).json()["id"]
    Trigger.objects.filter(pk=trigger_id).update(next_fire_at=timezone.now() - timedelta(1))
    fire_due_triggers()
    run = Run.objects.get(trigger_id=trigger_id)
    runs = api.get(f"/triggers/{trigger_id}/runs").json()["results"]
    assert [r["id"] for r in runs] == [run.pk] and runs[0]["agent"] == "analyst"
    assert runs[0]["trigger"] == trigger_id
    # bob sees the runs he started; these are alice's.
    assert session(trio.bob).get(f"/triggers/{trigger_id}/runs").json()["results"] == []
    assert api.delete(f"/triggers/{trigger_id}").status_code == 204
    assert Run.objects.filter(pk=run.pk, trigger=None).exists()  # the history stays
