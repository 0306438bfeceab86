"""agents/quotas.py: reserve and settle against every applicable limit, the refusal's text,
counters rebuilt from recorded runs, and no overrun under concurrency."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection, connections, transaction

from agents import quotas
from agents.models import Quota, Run
from agents.quotas import Meter, QuotaExceeded
from agents.runtime.quota_rules import DUPLICATE_QUOTA_MESSAGE
from base import versions
from providers.pricing import cost_of, price_for
from providers.runtime.errors import ProviderError
from providers.runtime.fake import FakeModel
from providers.runtime.types import ModelRequest, Usage, UserMessage
from tenancy import services as tenancy
from tenancy.models import ApiKey
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_agent

NOW = datetime(2026, 12, 2, 14, 30, tzinfo=UTC)


def _quota(tenant, **fields) -> Quota:
    fields.setdefault("scope", "tenant")
    fields.setdefault("metric", "tokens")
    fields.setdefault("period", "day")
    return Quota.objects.create(tenant=tenant, **fields)


def _key(tenant, user=None) -> ApiKey:
    return ApiKey.objects.create(
        tenant=tenant, name="ci", prefix=uuid.uuid4().hex[:12], secret_hash="x" * 64
    )


def _flush(quota: Quota) -> None:
    """Forget the quota's counters (as a Redis that lost its data)."""
    for key in versions.shared_redis().scan_iter(cache.make_key(f"quota:{quota.pk}:*")):
        versions.shared_redis().delete(key)


def test_a_call_outside_a_run_is_metered_as_its_user_or_its_key(trio):
    """Meter.for_initiator (a knowledge search's, web and REST): a member's or a key's own
    limits apply; without an initiator, the tenant's only. A metered adapter is otherwise
    the adapter it wraps."""
    tenant = trio.acme.pk
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read"])
    assert Meter.for_initiator(tenant, trio.bob) == Meter(tenant_id=tenant, user_id=trio.bob.pk)
    assert Meter.for_initiator(tenant, key) == Meter(tenant_id=tenant, api_key_id=key.pk)
    assert Meter.for_initiator(tenant) == Meter(tenant_id=tenant)
    metered = quotas.MeteredAdapter(FakeModel(["hi"], model="m-1"), Meter(tenant_id=tenant))
    assert (metered.provider, metered.model, metered.remaining) == ("fake", "m-1", 1)


def test_a_metered_call_whose_provider_fails_raises_its_error_and_holds_nothing(trio):
    quota = _quota(trio.acme, limit=100_000)
    metered = quotas.MeteredAdapter(FakeModel([ProviderError("down")]), Meter(trio.acme.pk))
    request = ModelRequest(model="fake-model", messages=[UserMessage("hi")], max_tokens=100)
    with pytest.raises(ProviderError, match="down"):  # not an error of the settlement
        asyncio.run(metered.complete(request))
    assert quotas.used(quota) == 0


def test_reserve_then_settle_keeps_what_was_used(trio):
    quota = _quota(trio.acme, limit=1000)
    meter = Meter(trio.acme.pk)
    held = quotas.reserve(meter, tokens=600, now=NOW)
    assert quotas.used(quota, NOW) == 600
    # The day's counter goes a day after the day ends (14:30 to midnight, then a day).
    counters = list(versions.shared_redis().scan_iter(cache.make_key(f"quota:{quota.pk}:*")))
    assert len(counters) == 1
    assert 0 < versions.shared_redis().ttl(counters[0]) <= 34_200 + quotas.KEEP_AFTER_PERIOD_S
    quotas.settle(held, tokens=150)
    assert quotas.used(quota, NOW) == 150
    with pytest.raises(QuotaExceeded):
        quotas.reserve(meter, tokens=900, now=NOW)  # 150 + 900 > 1000: nothing held
    assert quotas.used(quota, NOW) == 150
    quotas.settle(quotas.reserve(meter, tokens=850, now=NOW), tokens=850)
    assert quotas.used(quota, NOW) == 1000
    with pytest.raises(QuotaExceeded):
        quotas.reserve(meter, tokens=1, now=NOW)


def test_a_refusal_holds_nothing_on_the_other_limits(trio):
    agent = make_agent(trio.acme)
    tenant = _quota(trio.acme, limit=10_000)
    spend = _quota(trio.acme, metric="cost", limit=50_000_000)  # $50
    _quota(trio.acme, scope="agent", agent=agent, limit=100)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(
            Meter(trio.acme.pk, agent_id=agent.pk), tokens=500, cost_usd=Decimal("2"), now=NOW
        )
    assert "for agent 'assistant'" in str(refused.value)
    assert "up to 500 tokens more" in str(refused.value)  # what this limit was asked for
    assert quotas.used(tenant, NOW) == quotas.used(spend, NOW) == 0
    quotas.reserve(Meter(trio.acme.pk), tokens=500, now=NOW)  # another agent: fits
    assert quotas.used(tenant, NOW) == 500


@pytest.mark.parametrize("scope", ["tenant", "member", "api_key", "agent"])
def test_each_scope_limits_only_its_own_calls(trio, scope):
    agent, other_agent = make_agent(trio.acme), make_agent(trio.acme, slug="other")
    key, other_key = _key(trio.acme), _key(trio.acme)
    target = {"member": {"user": trio.bob}, "api_key": {"api_key": key}, "agent": {"agent": agent}}
    _quota(trio.acme, scope=scope, limit=100, **target.get(scope, {}))
    mine = Meter(trio.acme.pk, user_id=trio.bob.pk, api_key_id=key.pk, agent_id=agent.pk)
    others = Meter(trio.acme.pk, user_id=trio.alice.pk, api_key_id=other_key.pk,
                   agent_id=other_agent.pk)  # fmt: skip
    quotas.reserve(mine, tokens=100, now=NOW)
    with pytest.raises(QuotaExceeded):
        quotas.reserve(mine, tokens=1, now=NOW)
    if scope == "tenant":
        with pytest.raises(QuotaExceeded):
            quotas.reserve(others, tokens=1, now=NOW)
    else:
        quotas.reserve(others, tokens=1000, now=NOW)
    quotas.reserve(Meter(trio.globex.pk), tokens=1000, now=NOW)  # another tenant: untouched


def test_a_cost_limit_counts_dollars(trio):
    quota = _quota(trio.acme, metric="cost", period="month", limit=Decimal("1.50"))
    meter = Meter(trio.acme.pk)
    held = quotas.reserve(meter, tokens=10, cost_usd=Decimal("1.00"), now=NOW)
    quotas.settle(held, tokens=10, cost_usd=Decimal("0.25"))
    assert quotas.used(quota, NOW) == 0.25
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(meter, tokens=10, cost_usd=Decimal("1.30"), now=NOW)
    assert (
        "the monthly limit of $1.50 for the tenant cannot take this call (up to $1.30 more; "
        "$0.25 used of $1.50 this month)"
    ) in str(refused.value)
    held = quotas.reserve(meter, tokens=10, cost_usd=Decimal("1.25"), now=NOW)
    quotas.settle(held, tokens=10, cost_usd=Decimal("1.25"))
    with pytest.raises(QuotaExceeded):  # used up: even a call with no known price is refused
        quotas.reserve(meter, tokens=10, cost_usd=None, now=NOW)


def test_the_refusal_says_when_a_daily_limit_resets(trio):
    _quota(trio.acme, limit=10)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(Meter(trio.acme.pk), tokens=11, now=NOW)
    assert str(refused.value) == (
        "Quota exceeded: the daily limit of 10 tokens for the tenant cannot take this call "
        "(up to 11 tokens more; 0 tokens used of 10 tokens this day). "
        "It resets at 2026-12-03 00:00 UTC (in 9 h 30 min)."
    )
    quotas.reserve(Meter(trio.acme.pk), tokens=10, now=NOW)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(Meter(trio.acme.pk), tokens=1, now=NOW)
    exc = refused.value
    assert str(exc) == (
        "Quota exceeded: the daily limit of 10 tokens for the tenant is used up "
        "(10 tokens used of 10 tokens this day). It resets at 2026-12-03 00:00 UTC (in 9 h 30 min)."
    )
    assert exc.retry_after_s == 9 * 3600 + 30 * 60
    assert exc.details()["resets_at"] == "2026-12-03T00:00:00Z"


def test_the_refusal_says_when_a_monthly_limit_resets(trio):
    _quota(trio.acme, period="month", limit=0, scope="member", user=trio.bob)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(Meter(trio.acme.pk, user_id=trio.bob.pk), tokens=11, now=NOW)
    assert str(refused.value).startswith(
        "Quota exceeded: the monthly limit of 0 tokens for member bob is used up"
    )
    assert str(refused.value).endswith("It resets at 2027-01-01 00:00 UTC (in 29 d 9 h).")


def test_a_new_day_starts_from_zero(trio):
    _quota(trio.acme, limit=100)
    quotas.reserve(Meter(trio.acme.pk), tokens=100, now=NOW)
    tomorrow = datetime(2026, 12, 3, 0, 0, 1, tzinfo=UTC)
    quotas.reserve(Meter(trio.acme.pk), tokens=100, now=tomorrow)


def test_lost_counters_are_rebuilt_from_recorded_runs(trio):
    agent = make_agent(trio.acme)
    quota = _quota(trio.acme, scope="agent", agent=agent, limit=1000)
    Run.objects.create(
        tenant=trio.acme, agent=agent, input="x", correlation_id="c1",
        input_tokens=500, output_tokens=200, status="succeeded",
    )  # fmt: skip
    Run.objects.create(  # another agent's run: not this limit's
        tenant=trio.acme, input="x", correlation_id="c2", input_tokens=900, status="succeeded"
    )
    _flush(quota)
    meter = Meter(trio.acme.pk, agent_id=agent.pk)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve(meter, tokens=301)
    assert refused.value.used == 700
    quotas.reserve(meter, tokens=300)


def test_lost_counters_of_a_keys_tokens_and_of_cost_are_rebuilt_from_recorded_runs(trio):
    key = _key(trio.acme)
    tokens = _quota(trio.acme, scope="api_key", api_key=key, limit=1000)
    spend = _quota(trio.acme, metric="cost", limit=5_000_000)  # $5
    Run.objects.create(
        tenant=trio.acme, input="x", correlation_id="k1", initiated_by_api_key=key,
        input_tokens=400, output_tokens=100, cost_usd=Decimal("1.25"), status="succeeded",
    )  # fmt: skip
    Run.objects.create(  # nobody's key: not the key's limit, but the tenant's spending
        tenant=trio.acme, input="x", correlation_id="k2", input_tokens=900,
        cost_usd=Decimal("0.50"), status="succeeded",
    )  # fmt: skip
    bobs = _quota(trio.acme, scope="member", user=trio.bob, limit=1000)
    Run.objects.create(
        tenant=trio.acme, input="x", correlation_id="b1", initiated_by_user=trio.bob,
        input_tokens=30, status="succeeded",
    )  # fmt: skip
    Run.objects.create(  # another tenant's: none of these limits'
        tenant=trio.globex, input="x", correlation_id="g1", initiated_by_user=trio.bob,
        input_tokens=7000, cost_usd=Decimal("3"), status="succeeded",
    )  # fmt: skip
    for quota in (tokens, spend, bobs):
        _flush(quota)
    assert quotas.used(tokens) == 500
    assert quotas.used(spend) == Decimal("1.75")
    assert quotas.used(bobs) == 30


def test_changing_a_limit_applies_at_once(trio):
    quota = _quota(trio.acme, limit=10)
    with pytest.raises(QuotaExceeded):
        quotas.reserve(Meter(trio.acme.pk), tokens=50, now=NOW)
    quota.limit = 100
    quota.save()
    quotas.reserve(Meter(trio.acme.pk), tokens=50, now=NOW)
    quota.active = False
    quota.save()
    assert quotas.reserve(Meter(trio.acme.pk), tokens=10**9, now=NOW).empty


@pytest.mark.django_db(transaction=True)
def test_concurrent_reservations_never_overrun_the_limit(trio):
    quota = _quota(trio.acme, limit=1000)
    meter = Meter(trio.acme.pk)
    quotas.reserve(meter, tokens=0)  # the counter seeded (each thread would query otherwise)
    granted, refused = [], []
    start = threading.Barrier(16)

    def spend() -> None:
        start.wait()
        for _ in range(20):
            try:
                quotas.reserve(meter, tokens=7)
                granted.append(7)
            except QuotaExceeded:
                refused.append(1)

    threads = [threading.Thread(target=spend) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 1000 - 1000 % 7  # as many as fit, and not one more
    assert len(granted) + len(refused) == 320
    assert quotas.used(quota) == sum(granted)


@pytest.mark.django_db(transaction=True)
def test_a_same_limit_saved_meanwhile_is_refused_as_a_duplicate_is(trio):
    """A concurrent save that wins the unique constraint after this one's checks passed is
    refused with the words of the constraint's own check, and leaves one limit."""
    body = {"scope": "tenant", "metric": "tokens", "period": "day", "limit": Decimal(5)}

    def other_save() -> None:
        try:
            quotas.quota_save(tenant=trio.acme, changes=dict(body))
        finally:
            connections.close_all()

    def save_meanwhile(execute, sql, params, many, context):
        if sql.startswith('INSERT INTO "agents_quota"'):  # this save's checks have passed
            meanwhile = threading.Thread(target=other_save)
            meanwhile.start()
            meanwhile.join()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(save_meanwhile), pytest.raises(ValidationError) as raced:
        quotas.quota_save(tenant=trio.acme, changes=dict(body))
    with pytest.raises(ValidationError) as checked:  # the constraint's check, no race
        quotas.quota_save(tenant=trio.acme, changes=dict(body))
    assert raced.value.messages == [DUPLICATE_QUOTA_MESSAGE]
    assert "".join(checked.value.messages) == DUPLICATE_QUOTA_MESSAGE
    assert Quota.objects.count() == 1


def test_a_lost_cost_counter_is_rebuilt_from_each_runs_own_cost(trio):
    quota = _quota(trio.acme, metric="cost", period="month", limit=Decimal("5"))
    crew_run = Run.objects.create(  # a crew's own cost (its manager's calls) counts too
        tenant=trio.acme, input="x", correlation_id="c1", cost_usd=Decimal("0.50"),
        total_cost_usd=Decimal("3.50"), status="succeeded",
    )  # fmt: skip
    Run.objects.create(
        tenant=trio.acme, parent=crew_run, input="x", correlation_id="c1",
        cost_usd=Decimal("3.00"), total_cost_usd=Decimal("3.00"), status="succeeded",
    )  # fmt: skip
    _flush(quota)
    assert quotas.used(quota) == 3.5
    with pytest.raises(QuotaExceeded):
        quotas.reserve(Meter(trio.acme.pk), tokens=1, cost_usd=Decimal("1.51"))
    quotas.reserve(Meter(trio.acme.pk), tokens=1, cost_usd=Decimal("1.50"))


_SPENDER = """
import django, sys
django.setup()
from agents import quotas
meter, granted = quotas.Meter(int(sys.argv[1])), 0
for _ in range(60):
    try:
        quotas.reserve(meter, tokens=7)
        granted += 7
    except quotas.QuotaExceeded:
        pass
print(granted)
"""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_processes_sharing_one_limit_never_overrun_it(trio, settings):
    quota = _quota(trio.acme, limit=1000)
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    spenders = [
        processes.spawn(
            [sys.executable, "-c", _SPENDER, str(trio.acme.pk)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    granted = [int(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in spenders]
    assert sum(granted) == 1000 - 1000 % 7  # 240 tries of 7 tokens: as many as fit, no more
    assert quotas.used(quota) == sum(granted)


@pytest.mark.django_db(transaction=True)
def test_a_limit_changed_in_a_transaction_applies_once_committed_though_read_meanwhile(trio):
    """Another process reading the rules while the change is not committed caches the old
    ones under the new version; the bump at the commit makes every process read again."""
    quota = _quota(trio.acme, limit=100)
    assert [rule.limit for rule in quotas.tenant_rules(trio.acme.pk)] == [100]

    def another_process_reads() -> None:
        try:
            quotas.tenant_rules(trio.acme.pk)
        finally:
            connection.close()

    with transaction.atomic():
        quota.limit = 5
        quota.save()
        reader = threading.Thread(target=another_process_reads)
        reader.start()
        reader.join()
    assert [rule.limit for rule in quotas.tenant_rules(trio.acme.pk)] == [5]


def test_a_calls_cost_for_a_cost_limit_counts_its_cache_reads_and_writes(trio):
    """Prompt caching is billed: a cost limit counts a call's cache reads and writes at
    their own prices, as the run's cost does."""
    model = "claude-opus-4-5"
    price = price_for(trio.acme.pk, "anthropic", model)
    cost = quotas.call_cost(
        trio.acme.pk,
        "anthropic",
        model,
        1000,
        100,
        cache_read_tokens=10_000,
        cache_write_tokens=2000,
    )
    assert cost() == cost_of(price, 1000, 100, 10_000, 2000) > cost_of(price, 1000, 100)

    spend = _quota(trio.acme, metric="cost", limit=50_000_000)  # a call settled: the same
    held = quotas.reserve(Meter(trio.acme.pk), tokens=1, cost_usd=Decimal("1"))
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=10_000,
                  cache_write_tokens=2000)  # fmt: skip
    asyncio.run(quotas.settle_usage(held, trio.acme.pk, "anthropic", model, usage))
    assert Decimal(str(quotas.used(spend))) == cost()


def test_a_counter_seeded_twice_keeps_what_the_first_seeding_held(trio, monkeypatch):
    """Two processes find a counter missing at once and both seed it from the database:
    the later seed must not overwrite what the earlier one's reservation added (it would
    hand out the limit twice). Here the second found it missing just before the first
    seeded and reserved."""
    quota = _quota(trio.acme, limit=100)
    quotas.reserve(Meter(trio.acme.pk), tokens=60, now=NOW)  # the first: seeded, then held

    real = quotas._script
    answered = []

    def seen_missing_first(source: str):
        script = real(source)

        def run(*, keys, args):
            if source == quotas._RESERVE and not answered:
                answered.append(1)
                return [-1, 1]  # what the second saw before the first seeded
            return script(keys=keys, args=args)

        return run

    monkeypatch.setattr(quotas, "_script", seen_missing_first)
    with pytest.raises(QuotaExceeded):
        quotas.reserve(Meter(trio.acme.pk), tokens=50, now=NOW)  # 60 + 50 > 100
    assert quotas.used(quota, NOW) == 60
