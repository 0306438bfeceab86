"""Triggers' services (agents/triggers.py): saving with their rules, and schedules fired
exactly once however many claimers race, across restarts and downtime."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from agents.models import Run, Trigger
from agents.services import use_grant
from agents.triggers import fire_due_triggers, trigger_rotate_secret, trigger_save
from tenancy.models import AuditEntry, Membership, Role
from tenancy.policy import Principal
from tests import processes
from tests.factories import add_member, make_agent, make_user

pytestmark = pytest.mark.django_db


def principal(tenant, user) -> Principal:
    return Principal.of_membership(Membership.objects.get(tenant=tenant, user=user))


def schedule(trio, **changes) -> Trigger:
    agent = changes.pop("agent", None) or make_agent(trio.acme, "reporter")
    fields = {
        "name": "daily", "kind": "schedule", "agent": agent, "cron": "0 9 * * *",
        "timezone": "Europe/Berlin", "input_template": "Report for {{fired_at}}", **changes,
    }  # fmt: skip
    return trigger_save(tenant=trio.acme, by=principal(trio.acme, trio.alice), changes=fields)


def make_due(trigger: Trigger, ago: timedelta = timedelta(minutes=1)) -> None:
    Trigger.objects.filter(pk=trigger.pk).update(next_fire_at=timezone.now() - ago)


# -- saving ------------------------------------------------------------------------------------
def test_a_schedule_is_saved_with_its_next_fire_and_its_creator_as_run_as(trio):
    saved = schedule(trio)
    trigger = saved.trigger
    assert saved.secret is None and trigger.secret is None
    assert trigger.run_as == trio.alice and trigger.created_by == trio.alice
    assert trigger.public_id.startswith("trg_")
    assert timezone.now() < trigger.next_fire_at <= timezone.now() + timedelta(days=1)
    assert trigger.next_fire_at.astimezone(timezone.get_default_timezone()).minute == 0


def test_a_webhook_gets_a_secret_once_stored_encrypted(trio):
    agent = make_agent(trio.acme)
    saved = trigger_save(
        tenant=trio.acme, by=principal(trio.acme, trio.alice),
        changes={"name": "gh", "kind": "webhook", "agent": agent,
                 "input_template": "New issue: {{payload.issue.title}}"},
    )  # fmt: skip
    assert saved.secret.startswith("whsec_") and saved.trigger.next_fire_at is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM agents_trigger WHERE id = %s", [saved.trigger.pk])
        stored = cursor.fetchone()[0]
    assert saved.secret not in stored  # encrypted at rest
    new = trigger_rotate_secret(
        tenant=trio.acme, by=principal(trio.acme, trio.alice), trigger=saved.trigger
    )
    assert new != saved.secret and Trigger.objects.get(pk=saved.trigger.pk).secret == new
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM agents_trigger WHERE id = %s", [saved.trigger.pk])
        assert new not in cursor.fetchone()[0]
    entries = AuditEntry.objects.filter(tenant=trio.acme, object_type="agents.trigger")
    rotated = entries.filter(action="config.changed").get()
    assert rotated.changes == {"secret": ["[set]", "[changed]"]}
    assert not any(s in str(e.changes) for e in entries for s in (new, saved.secret))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": "* * * * *"}, "cron"),
        ({"cron": "nonsense"}, "cron"),
        ({"timezone": "Nowhere/City"}, "timezone"),
        ({"input_template": "{{payload.x}}"}, "input_template"),
        ({"input_template": "{{request.user}}"}, "input_template"),
        ({"name": ""}, "name"),
    ],
)
def test_it_refuses_bad_schedules(trio, changes, field):
    with pytest.raises(ValidationError) as refused:
        schedule(trio, **changes)
    assert field in refused.value.message_dict
    assert not Trigger.objects.exists()


def test_members_and_viewers_may_not_save_triggers(trio):
    with pytest.raises(PermissionDenied):
        trigger_save(tenant=trio.acme, by=principal(trio.acme, trio.bob), changes={})


def test_runs_are_attributed_only_to_a_member_who_may_start_the_agent_and_not_above_you(trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    agent = make_agent(trio.acme, "restricted")
    use_grant(tenant=trio.acme, target=agent, granted=True, user=dana)  # only dana and admins
    by_dana = principal(trio.acme, dana)
    base = {"name": "n", "kind": "schedule", "agent": agent, "cron": "0 9 * * *",
            "input_template": "go"}  # fmt: skip
    for run_as, why in [
        (trio.alice, "higher role"),  # an admin may not act as the owner
        (trio.bob, "may not start"),  # bob holds no grant on this agent
        (trio.charlie, "member of this workspace"),  # another tenant's owner
    ]:
        with pytest.raises(ValidationError, match=why):
            trigger_save(tenant=trio.acme, by=by_dana, changes={**base, "run_as": run_as})
    saved = trigger_save(tenant=trio.acme, by=by_dana, changes=base).trigger
    assert saved.run_as == dana


def test_another_tenants_agent_is_refused(trio):
    other = make_agent(trio.globex, "theirs")
    with pytest.raises(ValidationError, match="this workspace"):
        schedule(trio, agent=other)


# -- firing ------------------------------------------------------------------------------------
def test_a_due_schedule_starts_one_run_through_run_start_and_moves_on(trio):
    trigger = schedule(trio).trigger
    make_due(trigger)
    assert fire_due_triggers() == 1
    run = Run.objects.get(trigger=trigger)
    assert run.initiated_by_user == trio.alice and run.status == "queued"
    assert run.input.startswith("Report for 20") and run.agent.slug == "reporter"
    assert run.input.endswith(("+01:00", "+02:00"))  # the fire time in Berlin
    trigger.refresh_from_db()
    assert trigger.next_fire_at > timezone.now() and trigger.last_fired_at is not None
    assert fire_due_triggers() == 0  # nothing due until the next fire time
    assert Run.objects.filter(trigger=trigger).count() == 1


def test_fires_missed_during_downtime_start_one_run_not_one_per_missed_time(trio):
    trigger = schedule(trio, cron="0 * * * *").trigger  # hourly
    make_due(trigger, ago=timedelta(hours=5, minutes=1))  # five fires missed
    assert fire_due_triggers() == 1
    assert Run.objects.filter(trigger=trigger).count() == 1
    trigger.refresh_from_db()
    assert timezone.now() < trigger.next_fire_at <= timezone.now() + timedelta(hours=1)


def test_a_disabled_schedule_does_not_fire_and_is_rescheduled_from_now_when_enabled(trio):
    trigger = schedule(trio).trigger
    by = principal(trio.acme, trio.alice)
    trigger = trigger_save(tenant=trio.acme, by=by, trigger=trigger, changes={"enabled": False})
    assert trigger.trigger.next_fire_at is None
    Trigger.objects.filter(pk=trigger.trigger.pk).update(
        next_fire_at=timezone.now() - timedelta(minutes=5)
    )
    assert fire_due_triggers() == 0
    again = trigger_save(
        tenant=trio.acme, by=by, trigger=trigger.trigger, changes={"enabled": True}
    )
    assert again.trigger.next_fire_at > timezone.now()


def test_a_refused_run_is_recorded_and_the_schedule_goes_on(trio):
    trigger = schedule(trio).trigger
    trigger.agent.active = False
    trigger.agent.save()
    make_due(trigger)
    assert fire_due_triggers() == 1
    trigger.refresh_from_db()
    assert "not active" in trigger.last_error and trigger.next_fire_at > timezone.now()
    assert not Run.objects.filter(trigger=trigger).exists()


def test_a_member_who_left_gets_no_runs(trio):
    trigger = schedule(trio).trigger
    Trigger.objects.filter(pk=trigger.pk).update(run_as=trio.bob)
    Membership.objects.filter(tenant=trio.acme, user=trio.bob).delete()
    make_due(trigger)
    fire_due_triggers()
    trigger.refresh_from_db()
    assert "left the workspace" in trigger.last_error
    assert not Run.objects.filter(trigger=trigger).exists()


def test_a_claim_that_dies_before_committing_leaves_the_fire_for_the_next_beat(trio):
    """A beat process killed mid-claim (its transaction rolled back): the new beat loop after
    the restart fires the schedule once, and again nothing after that."""
    trigger = schedule(trio).trigger
    make_due(trigger)

    class Crash(Exception):
        pass

    with pytest.raises(Crash), transaction.atomic():
        assert fire_due_triggers() == 1
        raise Crash
    assert not Run.objects.filter(trigger=trigger).exists()
    assert fire_due_triggers() == 1  # the restarted loop
    assert fire_due_triggers() == 0
    assert Run.objects.filter(trigger=trigger).count() == 1


@pytest.mark.django_db(transaction=True)
@override_settings(TRIGGER_MIN_INTERVAL_S=300)
def test_due_schedules_fire_exactly_once_when_claimers_race(trio):
    """Four claimers (as four beat or worker processes would) at the same instant, over
    twenty due schedules: one run per schedule."""
    agent = make_agent(trio.acme, "racer")
    triggers = [schedule(trio, name=f"t{i}", agent=agent).trigger for i in range(20)]
    for trigger in triggers:
        make_due(trigger)
    start = threading.Barrier(4)
    counts: list[int] = []
    errors: list[BaseException] = []

    def claimer() -> None:
        try:
            start.wait()
            counts.append(fire_due_triggers(batch=3))
        except BaseException as exc:  # (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sum(counts) == 20
    for trigger in triggers:
        assert Run.objects.filter(trigger=trigger).count() == 1


CLAIMER = """
import sys, time
import django
django.setup()
from agents.triggers import fire_due_triggers
time.sleep(max(float(sys.argv[1]) - time.time(), 0))  # all start together
print(fire_due_triggers(batch=1))
"""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_due_schedules_fire_exactly_once_when_beat_processes_race(trio):
    """Three OS processes (three beats started by mistake, or beat and workers) claim one
    trigger at a time from thirty due ones, at the same instant: one run each."""
    import subprocess
    import sys
    import time

    from django.conf import settings

    from tests.conftest import ROOT, subprocess_env

    agent = make_agent(trio.acme, "racer")
    triggers = [schedule(trio, name=f"p{i}", agent=agent).trigger for i in range(30)]
    for trigger in triggers:
        make_due(trigger)
    start_at = str(time.time() + 8)  # after the children's Django set-up
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    children = [
        processes.spawn(
            [sys.executable, "-c", CLAIMER, start_at],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), outputs
    counts = [int(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert sum(counts) == 30
    for trigger in triggers:
        assert Run.objects.filter(trigger=trigger).count() == 1


def test_an_admin_may_disable_an_owners_trigger_but_not_change_what_it_runs(trio):
    trigger = schedule(trio).trigger  # made by alice, the owner: runs as alice
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    by_dana = principal(trio.acme, dana)
    with pytest.raises(ValidationError, match="higher role"):
        trigger_save(
            tenant=trio.acme, by=by_dana, trigger=trigger, changes={"input_template": "Leak"}
        )
    trigger = Trigger.objects.get(pk=trigger.pk)
    off = trigger_save(
        tenant=trio.acme, by=by_dana, trigger=trigger,
        changes={"enabled": False, "cron": trigger.cron, "input_template": trigger.input_template},
    )  # fmt: skip
    assert not off.trigger.enabled and off.trigger.run_as == trio.alice
    assert Trigger.objects.get(pk=trigger.pk).input_template == "Report for {{fired_at}}"
    with pytest.raises(ValidationError, match="higher role"):
        trigger_save(tenant=trio.acme, by=by_dana, trigger=trigger, changes={"enabled": True})


@pytest.mark.django_db(transaction=True)
def test_the_beat_task_on_a_real_worker_fires_a_schedule_and_the_run_executes(
    trio, agent, provider_server, celery_worker_process
):
    """The beat's entry sends `agents.fire_due_triggers` to the housekeeping queue; a real
    worker fires the due schedule and executes its run like any other."""
    import time

    from django.conf import settings

    from agents.tasks import fire_due_triggers_task
    from tests.fakes.provider_server import TextReply

    entry = settings.CELERY_BEAT_SCHEDULE["fire-due-triggers"]
    assert entry["task"] == "agents.fire_due_triggers"
    assert settings.CELERY_TASK_ROUTES[entry["task"]]["queue"] == settings.HOUSEKEEPING_QUEUE
    provider_server.script("openai", TextReply("All quiet overnight."))
    trigger = schedule(trio, agent=agent).trigger
    make_due(trigger)
    fire_due_triggers_task.apply_async()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        run = Run.objects.filter(trigger=trigger).first()
        if run is not None and run.is_terminal:
            break
        time.sleep(0.1)
    assert run is not None and run.status == "succeeded", run and run.error
    assert run.output == "All quiet overnight." and run.initiated_by_user == trio.alice
    trigger.refresh_from_db()
    assert trigger.next_fire_at > timezone.now()
