"""The pure rules of triggers (agents/runtime/triggers.py): schedules across DST, the
minimum interval, signatures, the input template. No database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.runtime.triggers import (
    TriggerRuleError,
    check_schedule,
    check_template,
    next_fire,
    render_input,
    sign,
    signature_refusal,
    trigger_problems,
)

BERLIN = "Europe/Berlin"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_a_daily_schedule_follows_the_wall_clock_across_both_dst_changes():
    # 09:00 Berlin is 08:00 UTC in winter, 07:00 UTC in summer.
    before_spring = next_fire("0 9 * * *", BERLIN, utc(2026, 3, 28, 12))
    after_spring = next_fire("0 9 * * *", BERLIN, before_spring)
    assert (before_spring, after_spring) == (utc(2026, 3, 29, 7), utc(2026, 3, 30, 7))
    before_autumn = next_fire("0 9 * * *", BERLIN, utc(2026, 10, 24, 12))
    assert before_autumn == utc(2026, 10, 25, 8)  # the first day of winter time


def test_a_time_skipped_by_spring_forward_fires_once_and_a_repeated_one_once():
    # 02:30 does not exist on 2026-03-29 in Berlin: it fires at 03:00 local (01:00 UTC).
    fires = [utc(2026, 3, 28, 12)]
    for _ in range(3):
        fires.append(next_fire("30 2 * * *", BERLIN, fires[-1]))
    assert fires[1:] == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]
    # 02:30 happens twice on 2026-10-25: one fire, not two.
    fires = [utc(2026, 10, 24, 12)]
    for _ in range(2):
        fires.append(next_fire("30 2 * * *", BERLIN, fires[-1]))
    assert fires[1:] == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_next_fire_is_strictly_after_the_given_time():
    assert next_fire("0 9 * * *", "UTC", utc(2026, 1, 1, 9)) == utc(2026, 1, 2, 9)


@pytest.mark.parametrize(
    ("expression", "zone", "why"),
    [
        ("* * * * *", "UTC", "more often"),
        ("0-1 9 * * *", "UTC", "more often"),  # two fires a minute apart, once a day
        ("bad", "UTC", "Not a cron"),
        ("61 * * * *", "UTC", "Not a cron"),
        ("0 0 30 2 *", "UTC", "Not a cron"),
        ("", "UTC", "needs a cron"),
        ("0 9 * * *", "Mars/Olympus", "time zone"),
        ("0 9 * * *", "../../etc/passwd", "time zone"),
        ("0 9 * * *", "localtime", "time zone"),  # (the server's own: not an IANA choice)
        ("0 " * 60, "UTC", "At most"),
    ],
)
def test_it_refuses_bad_or_too_frequent_schedules(expression, zone, why):
    with pytest.raises(TriggerRuleError, match=why):
        check_schedule(expression, zone, min_interval_s=300, now=utc(2026, 1, 1))


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("61 * * * *", "Not a cron expression: its minute (0-59) field is not valid."),
        ("* 25 * * *", "Not a cron expression: its hour (0-23) field is not valid."),
        ("* * * 13 *", "Not a cron expression: its month (1-12 or JAN-DEC) field is not valid."),
        ("* * *", "Not a cron expression: five fields, minute hour day-of-month month "),
    ],
)
def test_a_bad_cron_expression_is_explained_in_our_words(expression, why):
    with pytest.raises(TriggerRuleError) as refused:
        check_schedule(expression, "UTC", min_interval_s=300, now=utc(2026, 1, 1))
    assert str(refused.value).startswith(why)
    assert "Bad" not in str(refused.value) and "Wrong" not in str(refused.value)  # (cronsim's)


def test_a_webhooks_time_zone_is_checked_too():
    rules = {"name": "hook", "kind": "webhook", "cron": "", "input_template": "Hi",
             "min_interval_s": 300, "now": utc(2026, 1, 1)}  # fmt: skip
    assert trigger_problems(timezone="../../etc/passwd", **rules) == {
        "timezone": "Unknown time zone '../../etc/passwd': use an IANA name."
    }
    assert trigger_problems(timezone="Europe/Lisbon", **rules) == {}
    assert trigger_problems(timezone="", **rules) == {}


def test_it_accepts_a_schedule_at_the_minimum_interval():
    first = check_schedule("*/5 * * * *", BERLIN, min_interval_s=300, now=utc(2026, 1, 1, 0, 1))
    assert first == utc(2026, 1, 1, 0, 5)


def test_a_good_signature_passes_and_bad_or_old_ones_do_not():
    body, secret, now = b'{"a": 1}', "whsec_x", 1_800_000_000
    good = sign(secret, str(now), body)
    check = lambda **kw: signature_refusal(  # noqa: E731
        **{"secret": secret, "timestamp": str(now), "signature": good, "body": body,
           "now": now + 10, "tolerance_s": 300, **kw}
    )  # fmt: skip
    assert check() is None
    assert "does not match" in check(body=b'{"a": 2}')
    assert "does not match" in check(secret="whsec_y")
    assert "does not match" in check(signature="sha256=" + "0" * 64)
    assert "required" in check(signature=None)
    assert "required" in check(timestamp="")
    assert "Unix seconds" in check(timestamp="yesterday")
    assert "window" in check(now=now + 301)  # a delivery replayed later
    assert "does not match" in check(timestamp=str(now + 1))  # the timestamp is signed


def test_the_template_takes_paths_from_the_payload_once():
    payload = {"issue": {"title": "Crash", "labels": ["bug", "p1"], "n": 3}, "x": "{{payload.x}}"}
    context = {"payload": payload, "trigger": {"name": "gh"}, "fired_at": "2026-01-01T00:00:00"}
    text = render_input(
        "{{ trigger.name }}: {{payload.issue.title}} {{payload.issue.labels.1}} "
        "{{payload.issue.n}} {{payload.issue.labels}} [{{payload.missing.deep}}] {{payload.x}}",
        context,
        max_chars=1000,
    )
    # A value is never expanded again: the `{{payload.x}}` inside the payload stays text.
    assert text == 'gh: Crash p1 3 ["bug", "p1"] [] {{payload.x}}'


def test_the_template_is_bounded_and_never_executed():
    with pytest.raises(TriggerRuleError, match="longer than"):
        render_input("{{payload.big}}", {"payload": {"big": "x" * 50}}, max_chars=20)
    with pytest.raises(TriggerRuleError, match="empty"):
        render_input("{{payload.none}}", {"payload": {}}, max_chars=20)
    # Django/Jinja syntax is just text.
    text = render_input("{% load x %}{{ 7*7 }}{{payload.__class__}}", {"payload": {}}, max_chars=99)
    assert text == "{% load x %}{{ 7*7 }}"


@pytest.mark.parametrize(
    ("template", "payload_allowed", "why"),
    [
        ("{{settings.SECRET_KEY}}", True, "Unknown placeholder"),
        ("{{payload.a}}", False, "no payload"),
        ("", True, "Give"),
        ("x" * 10_001, True, "At most"),
        ("a\x00b", True, "NUL"),
    ],
)
def test_it_refuses_templates_naming_what_the_context_never_has(template, payload_allowed, why):
    with pytest.raises(TriggerRuleError, match=why):
        check_template(template, payload_allowed=payload_allowed)


def test_a_template_repeating_a_large_value_stops_at_the_limit():
    import time

    context = {"payload": {"a": "x" * 150_000}, "trigger": {"name": "t"}, "fired_at": "now"}
    started = time.perf_counter()
    with pytest.raises(TriggerRuleError, match="longer than 20000 characters"):
        render_input("{{payload}}" * 909, context, max_chars=20_000)
    assert time.perf_counter() - started < 0.5  # (was 909 dumps and 18 MB: 15 s)
