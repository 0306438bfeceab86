"""A tenant's time zone for its quotas: days and months begin at its midnight (23- and
25-hour days where clocks change), the refusal names the zone, a change of zone keeps the
current period's counter, and the zone is set (and validated) on the Quotas page, over REST
and in the admin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from agents import quotas
from agents.models import Quota, Run
from agents.quotas import Meter, QuotaExceeded, period_bounds
from tenancy.models import AuditEntry, Tenant
from tenancy.services import tenant_time_zone_set
from tests.factories import login, make_user

pytestmark = pytest.mark.django_db


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def _zone(tenant: Tenant, name: str) -> None:
    tenant_time_zone_set(tenant=tenant, time_zone=name)


def _limit(tenant, limit, **fields) -> Quota:
    fields = {"scope": "tenant", "metric": "tokens", "period": "day", **fields}
    return Quota.objects.create(tenant=tenant, limit=limit, **fields)


# -- periods -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("zone", "now", "start", "end", "hours"),
    [
        # Lisbon springs forward on 2026-03-29 at 01:00 UTC (WET -> WEST): a 23-hour day.
        ("Europe/Lisbon", utc(2026, 3, 29, 12), utc(2026, 3, 29, 0), utc(2026, 3, 29, 23), 23),
        # ... and falls back on 2026-10-25 at 01:00 UTC: a 25-hour day.
        ("Europe/Lisbon", utc(2026, 10, 25, 12), utc(2026, 10, 24, 23), utc(2026, 10, 26, 0), 25),
        # New York falls back on 2026-11-01 at 06:00 UTC (EDT -> EST): 25 hours.
        ("America/New_York", utc(2026, 11, 1, 3), utc(2026, 10, 31, 4), utc(2026, 11, 1, 4), 24),
        ("America/New_York", utc(2026, 11, 1, 12), utc(2026, 11, 1, 4), utc(2026, 11, 2, 5), 25),
        # ... and springs forward on 2026-03-08 at 07:00 UTC: 23 hours.
        ("America/New_York", utc(2026, 3, 8, 12), utc(2026, 3, 8, 5), utc(2026, 3, 9, 4), 23),
        ("UTC", utc(2026, 3, 8, 12), utc(2026, 3, 8, 0), utc(2026, 3, 9, 0), 24),
    ],
)
def test_a_day_begins_at_the_zones_midnight_across_clock_changes(zone, now, start, end, hours):
    begins, ends = period_bounds("day", now, zone)
    assert (begins, ends) == (start, end)
    assert (ends - begins).total_seconds() == hours * 3600
    local = ZoneInfo(zone)
    assert (begins.astimezone(local).hour, ends.astimezone(local).hour) == (0, 0)


def test_a_month_begins_at_the_zones_midnight_of_its_first_day():
    # March 2026 in New York: begins in EST (UTC-5), ends in EDT (UTC-4).
    assert period_bounds("month", utc(2026, 3, 15), "America/New_York") == (
        utc(2026, 3, 1, 5),
        utc(2026, 4, 1, 4),
    )
    # Lisbon is UTC+0 in winter: 2026-11-30 23:30 UTC is still November there.
    assert period_bounds("month", utc(2026, 11, 30, 23, 30), "Europe/Lisbon")[1] == utc(2026, 12, 1)
    # 2026-05-31 23:30 UTC is June 1st in Lisbon (WEST, UTC+1): June's month.
    assert period_bounds("month", utc(2026, 5, 31, 23, 30), "Europe/Lisbon") == (
        utc(2026, 5, 31, 23),
        utc(2026, 6, 30, 23),
    )


def test_the_day_turns_at_the_tenants_midnight_not_utcs(trio):
    _zone(trio.acme, "Europe/Lisbon")
    _limit(trio.acme, 100)
    meter = Meter(trio.acme.pk)
    quotas.reserve(meter, tokens=100, now=utc(2026, 6, 10, 22, 30))  # 23:30 in Lisbon
    with pytest.raises(QuotaExceeded):
        quotas.reserve(meter, tokens=1, now=utc(2026, 6, 10, 22, 59))
    quotas.reserve(meter, tokens=100, now=utc(2026, 6, 10, 23, 0))  # midnight in Lisbon


# -- the refusal -------------------------------------------------------------------------------
def test_the_refusal_names_the_zone_and_its_local_reset(trio):
    _zone(trio.acme, "America/New_York")
    _limit(trio.acme, 10)
    now = utc(2026, 11, 1, 12)  # 07:00 EST, the day clocks fell back
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(Meter(trio.acme.pk), tokens=11, now=now)
    exc = refused.value
    assert str(exc).endswith("It resets at 2026-11-02 00:00 America/New_York (in 17 h 0 min).")
    assert exc.retry_after_s == 17 * 3600
    assert exc.details()["resets_at"] == "2026-11-02T05:00:00Z"
    assert exc.details()["time_zone"] == "America/New_York"
    assert quotas.refusal_retry_after(f"QuotaExceeded: {exc}", now) == 17 * 3600


def test_a_refusal_in_its_last_second_says_retry_after_one_second_and_only_a_refusal_does():
    """What /v1 answers a refused run with (Retry-After), from the run's error."""
    error = "QuotaExceeded: Quota exceeded: 10 tokens a day. It resets at 2026-11-02 00:00 UTC (in "
    almost = datetime(2026, 11, 1, 23, 59, 59, 500_000, tzinfo=UTC)
    assert quotas.refusal_retry_after(error + "1 min).", almost) == 1
    other = "tool failed: It resets at 2026-11-02 00:00 UTC (in 1 min)."  # not a refusal
    assert quotas.refusal_retry_after(other, almost) is None


def test_a_monthly_refusal_in_lisbon_resets_at_its_local_midnight(trio):
    _zone(trio.acme, "Europe/Lisbon")
    _limit(trio.acme, 0, period="month", scope="member", user=trio.bob)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(Meter(trio.acme.pk, user_id=trio.bob.pk), tokens=1, now=utc(2026, 3, 20))
    assert str(refused.value).endswith(
        "It resets at 2026-04-01 00:00 Europe/Lisbon (in 11 d 23 h)."
    )
    assert refused.value.details()["resets_at"] == "2026-03-31T23:00:00Z"


# -- a change of zone --------------------------------------------------------------------------
def test_a_change_of_zone_keeps_the_current_days_usage(trio):
    quota = _limit(trio.acme, 1000)
    now = utc(2026, 12, 2, 14, 30)
    quotas.reserve(Meter(trio.acme.pk), tokens=600, now=now)
    for zone in ("America/New_York", "Asia/Tokyo", "Europe/Lisbon"):  # all on Dec 2 then
        _zone(trio.acme, zone)
        quota.refresh_from_db()
        assert quotas.used(quota, now) == 600, zone
        with pytest.raises(QuotaExceeded) as refused:
            quotas.reserve(Meter(trio.acme.pk), tokens=401, now=now)
        assert zone in str(refused.value)


def test_a_rebuilt_counter_counts_the_runs_of_the_local_day(trio):
    _zone(trio.acme, "America/New_York")
    quota = _limit(trio.acme, 1000)
    for at, tokens in ((utc(2026, 11, 1, 3, 30), 300), (utc(2026, 11, 1, 4, 30), 50)):
        run = Run.objects.create(
            tenant=trio.acme, input="x", correlation_id=str(tokens), input_tokens=tokens,
            status="succeeded",
        )  # fmt: skip
        Run.objects.filter(pk=run.pk).update(created_at=at)
    quota.refresh_from_db()
    # 03:30 UTC is Oct 31 in New York, 04:30 UTC is Nov 1: only the second counts on Nov 1.
    assert quotas.used(quota, utc(2026, 11, 1, 12)) == 50


# -- setting it --------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["Mars/Olympus", "localtime", "../../etc/passwd", "", "utc "])
def test_an_unknown_zone_is_refused_and_nothing_changes(trio, bad):
    with pytest.raises(ValidationError) as refused:
        tenant_time_zone_set(tenant=trio.acme, time_zone=bad)
    assert "time_zone" in refused.value.message_dict
    assert trio.acme.time_zone == "UTC"
    trio.acme.refresh_from_db()
    assert trio.acme.time_zone == "UTC"


def test_setting_it_is_recorded_in_the_audit_log(trio):
    _zone(trio.acme, "Europe/Lisbon")
    entry = AuditEntry.objects.filter(tenant=trio.acme).latest("pk")
    assert entry.changes == {"time_zone": ["UTC", "Europe/Lisbon"]}


def test_the_quotas_page_sets_the_zone_for_admins_only(client: Client, trio):
    login(client, trio.alice)
    page = client.get("/t/acme/quotas/").content.decode()
    assert 'name="time_zone"' in page and "UTC" in page
    response = client.post("/t/acme/quotas/time-zone/", {"time_zone": "Nope/Nowhere"})
    assert response.status_code == 400
    assert "Give an IANA time zone name" in response.content.decode()
    response = client.post("/t/acme/quotas/time-zone/", {"time_zone": "Europe/Lisbon"})
    assert response.status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.time_zone == "Europe/Lisbon"
    _limit(trio.acme, 10)
    assert "00:00 Europe/Lisbon" in client.get("/t/acme/quotas/").content.decode()
    login(client, trio.bob)
    assert client.post("/t/acme/quotas/time-zone/", {"time_zone": "UTC"}).status_code == 403
    login(client, trio.charlie)
    assert client.post("/t/acme/quotas/time-zone/", {"time_zone": "UTC"}).status_code == 404
    trio.acme.refresh_from_db()
    assert trio.acme.time_zone == "Europe/Lisbon"


def _session(user) -> APIClient:
    api = APIClient()
    api.force_login(user)
    api.credentials(HTTP_X_TENANT="acme")
    return api


def test_rest_reads_and_sets_the_zone(trio):
    alice, bob = _session(trio.alice), _session(trio.bob)
    assert bob.get("/api/v1/time-zone").json() == {"time_zone": "UTC"}
    response = alice.patch("/api/v1/time-zone", {"time_zone": "Mars/Olympus"}, format="json")
    assert response.status_code == 400
    assert "time_zone" in str(response.json())
    response = alice.patch("/api/v1/time-zone", {"time_zone": "America/New_York"}, format="json")
    assert response.status_code == 200 and response.json() == {"time_zone": "America/New_York"}
    assert bob.patch("/api/v1/time-zone", {"time_zone": "UTC"}, format="json").status_code == 403
    quota = _limit(trio.acme, 10)
    body = alice.get(f"/api/v1/quotas/{quota.pk}").json()
    assert body["resets_at"].endswith(("T04:00:00Z", "T05:00:00Z"))  # New York's midnight


def test_the_admin_validates_the_zone(client: Client, trio):
    login(client, make_user("root", is_superuser=True, is_staff=True))
    url = f"/admin/tenancy/tenant/{trio.acme.pk}/change/"
    form = {"slug": "acme", "name": trio.acme.name, "active": "on", "password_sign_in": "on"}
    response = client.post(url, {**form, "time_zone": "Nope/Nowhere"})
    assert response.status_code == 200 and "Give an IANA time zone name" in response.text
    response = client.post(url, {**form, "time_zone": "Europe/Lisbon"})
    assert response.status_code == 302
    trio.acme.refresh_from_db()
    assert trio.acme.time_zone == "Europe/Lisbon"


@pytest.mark.parametrize(
    "seconds_left, retry_after, in_words",
    [
        (0.5, 1, "in 1 min"),
        (121, 121, "in 3 min"),  # minutes alone: rounded up
        (5459, 5459, "in 1 h 30 min"),  # with hours: whole minutes
        (2 * 86_400 + 3 * 3600 + 59, 183_659, "in 2 d 3 h"),
    ],
)
def test_a_refusal_says_how_long_until_it_resets(seconds_left, retry_after, in_words):
    rule = quotas.Rule(
        id=1, tenant_id=1, scope="tenant", target_id=None, metric="tokens", period="day",
        limit=100, label="the daily limit of 100 tokens for the tenant",
    )  # fmt: skip
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    refused = QuotaExceeded(rule, 100, now + timedelta(seconds=seconds_left), now)
    assert refused.retry_after_s == retry_after
    assert str(refused).endswith(f"({in_words}).")
