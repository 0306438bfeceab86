"""Triggers in the tenant-scoped admin (agents/trigger_admin.py): saved through the
service with its rules, secrets shown once, scoped to the admin's tenants."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from agents.models import Run, Trigger
from agents.triggers import fire_due_triggers
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db

ADD = "/admin/agents/trigger/add/"


def form(agent, user, **extra):
    return {
        "name": "nightly", "kind": "schedule", "agent": agent.pk, "crew": "",
        "cron": "0 2 * * *", "timezone": "Asia/Tokyo", "input_template": "Nightly digest",
        "run_as": user.pk, "enabled": "on", **extra,
    }  # fmt: skip


def test_an_owner_adds_a_schedule_and_a_webhook_in_the_admin(client, trio):
    agent = make_agent(trio.acme, "digest")
    login(client, trio.alice)
    page = client.get(ADD).content.decode()
    assert "digest" in page.lower()
    added = client.post(ADD, form(agent, trio.alice))
    assert added.status_code == 302, added.content.decode()[:3000]
    trigger = Trigger.objects.get(name="nightly")
    assert trigger.tenant == trio.acme and trigger.next_fire_at and trigger.public_id
    hook = client.post(
        ADD,
        form(agent, trio.alice, name="hook", kind="webhook", cron="", input_template="{{payload}}"),
        follow=True,
    )
    made = Trigger.objects.get(name="hook")
    shown = [str(m) for m in get_messages(hook.wsgi_request)] + [hook.content.decode()]
    assert any(made.secret in text for text in shown)
    change = client.get(f"/admin/agents/trigger/{made.pk}/change/").content.decode()
    assert made.secret not in change


def test_the_admin_form_shows_the_trigger_rules(client, trio):
    agent = make_agent(trio.acme, "digest")
    login(client, trio.alice)
    too_often = client.post(ADD, form(agent, trio.alice, cron="*/2 * * * *"))
    assert too_often.status_code == 200 and "more often" in too_often.content.decode()
    neither = {**form(agent, trio.alice), "agent": ""}
    assert client.post(ADD, neither).status_code == 200
    assert not Trigger.objects.exists()


def test_another_tenants_owner_sees_none_of_it(client, trio):
    agent = make_agent(trio.acme, "digest")
    login(client, trio.alice)
    client.post(ADD, form(agent, trio.alice))
    trigger = Trigger.objects.get()
    login(client, trio.charlie)
    assert client.get(f"/admin/agents/trigger/{trigger.pk}/change/").status_code == 404
    assert "nightly" not in client.get("/admin/agents/trigger/").content.decode()
    # and cannot point a trigger of theirs at acme's agent
    refused = client.post(ADD, form(agent, trio.charlie, name="spy"))
    assert refused.status_code == 200
    assert not Trigger.objects.filter(name="spy").exists()


def test_the_rotate_action_and_the_runs_link(client, trio):
    agent = make_agent(trio.acme, "digest")
    login(client, trio.alice)
    client.post(ADD, form(agent, trio.alice, name="hook", kind="webhook", cron=""))
    client.post(ADD, form(agent, trio.alice))
    hook, schedule = Trigger.objects.get(name="hook"), Trigger.objects.get(name="nightly")
    old = hook.secret
    done = client.post(
        "/admin/agents/trigger/",
        {"action": "rotate_secrets", "_selected_action": [hook.pk, schedule.pk]},
        follow=True,
    )
    hook.refresh_from_db()
    assert hook.secret != old and hook.secret in done.content.decode()
    Trigger.objects.filter(pk=schedule.pk).update(next_fire_at=timezone.now() - timedelta(1))
    fire_due_triggers()
    run = Run.objects.get(trigger=schedule)
    listed = client.get(f"/admin/agents/run/?trigger__id__exact={schedule.pk}")
    assert listed.status_code == 200 and f"/admin/agents/run/{run.pk}/change/" in (
        listed.content.decode()
    )
