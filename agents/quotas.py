"""Quotas and budgets that block: every model call reserves against the limits that apply
to it, and settles with what it used (docs/quotas.md).

A model call is metered for a `Meter` (tenant, member, API key, agent). Before the call,
`reserve` adds an estimate (input estimate + max output tokens, and its price) to the
counter of every applicable limit in one Redis Lua script, which first checks them all:
either every counter takes the estimate or none does, so concurrent calls cannot overrun a
limit. After the call, `settle` adds the difference between what was used and what was
reserved (usually giving some back). A refusal is a `QuotaExceeded` naming the limit and
when it resets.

Counters live in Redis, one key per limit and period (`quota:<id>:<period start>`),
expiring a day after their period ends. A key Redis does not have (a new period, or a Redis
that lost its data) is first seeded from PostgreSQL: the usage of the runs recorded in the
period (every run, child run and gateway call is a Run row with its usage), so counters
rebuild themselves; only reservations in flight at the moment of the loss are forgotten.

Periods are calendar days and months in the tenant's time zone (`Tenant.time_zone`, UTC by
default); a counter's key names its period by the local date it begins on, so a change of
zone keeps the current period's counter (docs/quotas.md, "Time zone").
"""

from __future__ import annotations

import calendar
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models import F, Sum
from django.db.models.signals import post_delete, post_save
from django.db.transaction import on_commit
from django.dispatch import receiver
from django.http import Http404
from django.utils import timezone
from redis.exceptions import RedisError

from agents.models import Quota, QuotaMetric, QuotaPeriod, QuotaScope, Run
from agents.runtime.quota_rules import DUPLICATE_QUOTA_MESSAGE
from base import versions
from base.stream_reads import stream_read
from providers.pricing import cost_of, price_for
from providers.runtime.errors import QuotaRefused
from providers.runtime.estimates import (
    cut_usage,
    estimate_input_tokens,
    estimate_text_tokens,  # noqa: F401 (the faces estimate their inputs here)
)
from providers.runtime.types import (
    Done,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from tenancy import rls
from tenancy.access import get_for_tenant
from tenancy.models import ApiKey, Tenant
from tenancy.records.saving import SaveConflict, delete_recorded, save_validated

logger = logging.getLogger(__name__)
MICROS = Decimal(1_000_000)  # cost counters count millionths of a dollar (whole numbers)
KEEP_AFTER_PERIOD_S = 86_400  # a late settle still finds its period's counter


# -- who a call is for, and the limits that apply ----------------------------------------------
@dataclass(frozen=True)
class Meter:
    """Whom a model call counts against. A crew's child run carries its parent's member and
    key; `agent_id` is the agent whose model is called."""

    tenant_id: int
    user_id: int | None = None
    api_key_id: int | None = None
    agent_id: int | None = None

    @classmethod
    def for_initiator(cls, tenant_id: int, initiator: Any = None) -> Meter:
        """For a call a user or an API key (an ApiKey) makes outside a run; None: the
        tenant's limits only (the platform's own work, such as an ingestion)."""
        if isinstance(initiator, ApiKey):
            return cls(tenant_id=tenant_id, api_key_id=initiator.pk)
        user_id = getattr(initiator, "pk", None) if initiator is not None else None
        return cls(tenant_id=tenant_id, user_id=user_id)

    @classmethod
    def for_run(cls, run: Run, agent_id: int | None = None) -> Meter:
        return cls(
            tenant_id=run.tenant_id,
            user_id=run.initiated_by_user_id,
            api_key_id=run.initiated_by_api_key_id,
            agent_id=agent_id if agent_id is not None else run.agent_id,
        )


@dataclass(frozen=True)
class Rule:
    """A Quota as enforcement reads it (kept per process per quota version)."""

    id: int
    tenant_id: int
    scope: str
    target_id: int | None
    metric: str
    period: str
    limit: int  # tokens, or millionths of a dollar
    label: str
    time_zone: str = "UTC"  # the tenant's: where its days and months begin

    def applies_to(self, meter: Meter) -> bool:
        return {
            QuotaScope.TENANT: True,
            QuotaScope.MEMBER: meter.user_id is not None and meter.user_id == self.target_id,
            QuotaScope.API_KEY: meter.api_key_id is not None and meter.api_key_id == self.target_id,
            QuotaScope.AGENT: meter.agent_id is not None and meter.agent_id == self.target_id,
        }[self.scope]


def _rule(quota: Quota) -> Rule:
    target = {
        QuotaScope.TENANT: None,
        QuotaScope.MEMBER: quota.user_id,
        QuotaScope.API_KEY: quota.api_key_id,
        QuotaScope.AGENT: quota.agent_id,
    }[quota.scope]
    units = quota.limit * MICROS if quota.metric == QuotaMetric.COST else quota.limit
    return Rule(
        id=quota.pk,
        tenant_id=quota.tenant_id,
        scope=quota.scope,
        target_id=target,
        metric=quota.metric,
        period=quota.period,
        limit=int(units),
        label=quota.label,
        time_zone=quota.tenant.time_zone,
    )


_rules: dict[int, tuple[str, tuple[Rule, ...]]] = {}


def _version_key(tenant_id: int) -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    return f"{prefix}:quotas:version:{tenant_id}"


def _known_rules(tenant_id: int) -> tuple[Rule, ...] | None:
    """The tenant's rules if this process holds their current version (no database)."""
    kept = _rules.get(tenant_id)
    if kept is not None and kept[0] == versions.current(_version_key(tenant_id)):
        return kept[1]
    return None


def tenant_rules(tenant_id: int) -> tuple[Rule, ...]:
    """The tenant's active limits: one query when they changed since this process read them."""
    known = _known_rules(tenant_id)
    if known is not None:
        return known
    version = versions.current(_version_key(tenant_id))
    with rls.tenant_scope(tenant_id):
        quotas = Quota.objects.filter(tenant_id=tenant_id, active=True).select_related(
            "tenant", "user", "api_key", "agent"
        )
        built = tuple(_rule(q) for q in quotas)
    _rules[tenant_id] = (version, built)
    return built


@receiver([post_save, post_delete], sender=Quota)
def _quota_changed(sender, instance: Quota, **kwargs) -> None:
    _bump(instance.tenant_id)


@receiver(post_save, sender=Tenant)
def _tenant_changed(sender, instance: Tenant, **kwargs) -> None:
    """Its time zone is in its rules: they are read again at its next call."""
    _bump(instance.pk)


def _bump(tenant_id: int) -> None:
    key = _version_key(tenant_id)
    versions.bump(key)
    on_commit(lambda: versions.bump(key))


# -- setting limits (web pages, admin, REST) ---------------------------------------------------
def quota_list(*, tenant: Tenant) -> list[Quota]:
    return list(
        Quota.objects.filter(tenant=tenant).select_related("tenant", "user", "api_key", "agent")
    )


def quota_get(*, tenant: Tenant, quota_id: Any) -> Quota:
    """The tenant's quota `quota_id`; 404 for another tenant's or an unknown id."""
    try:
        pk = int(quota_id)
    except (TypeError, ValueError):
        pk = -1
    return get_for_tenant(
        Quota.objects.select_related("tenant", "user", "api_key", "agent"), tenant, pk=pk
    )


def quota_save(
    *, tenant: Tenant, quota: Quota | None = None, changes: dict[str, Any], actor: Any = None
) -> Quota:
    """Create or change a limit (validated by Quota.clean; a second limit of the same
    target, metric and period is a ValidationError). It applies to the next model call."""
    if quota is None:
        quota = Quota(tenant=tenant)
    elif quota.tenant_id != tenant.pk:
        raise Http404("No such quota.")
    if quota.pk is None or "scope" in changes:  # targets the scope does not take are cleared
        scope = changes.get("scope", quota.scope)
        keep = {"member": "user", "api_key": "api_key", "agent": "agent"}.get(scope)
        for name in ("user", "api_key", "agent"):
            if name != keep:
                changes.setdefault(name, None)
    try:
        return save_validated(quota, changes, actor=actor)
    except SaveConflict:
        raise ValidationError(DUPLICATE_QUOTA_MESSAGE) from None


def quota_delete(*, tenant: Tenant, quota: Quota, actor: Any = None) -> None:
    if quota.tenant_id != tenant.pk:
        raise Http404("No such quota.")
    delete_recorded(quota, actor=actor)


# -- periods ---------------------------------------------------------------------------------
def period_bounds(
    period: str, now: datetime | None = None, time_zone: str = "UTC"
) -> tuple[datetime, datetime]:
    """The calendar day or month holding `now` in `time_zone` (an IANA name): its start
    and its end, as UTC instants (aware datetimes of one zone subtract as wall clocks). A
    day is 23 or 25 hours long where clocks change that day."""
    zone = _zone(time_zone)
    today = (now or timezone.now()).astimezone(zone).date()
    if period == QuotaPeriod.DAY:
        first, following = today, date.fromordinal(today.toordinal() + 1)
    else:
        first = today.replace(day=1)
        days = calendar.monthrange(first.year, first.month)[1]
        following = date.fromordinal(first.toordinal() + days)
    return _midnight(first, zone), _midnight(following, zone)


def _midnight(day: date, zone: ZoneInfo) -> datetime:
    """The first instant of `day` in `zone`, in UTC. Where clocks jump over midnight (a
    gap), the wall time 00:00 read with the offset before the jump (fold 0) is exactly the
    jump's instant, the day's first; where midnight repeats, fold 0 is its first time."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ValueError, KeyError, OSError):  # (a name validation let through: never a 500)
        logger.error("quotas: unknown time zone %r, counting in UTC", name)
        return ZoneInfo("UTC")


def _key(rule: Rule, start: datetime) -> str:
    """The counter of the period that begins at `start`: named by its date in the tenant's
    zone, so a change of zone continues the counter of the same date."""
    return cache.make_key(f"quota:{rule.id}:{start.astimezone(_zone(rule.time_zone)):%Y%m%d}")


# -- the refusal -----------------------------------------------------------------------------
class QuotaExceeded(QuotaRefused, ValidationError):
    """A call refused because a limit is used up. A ValidationError to the faces (each maps
    it to its refusal: HTTP 429, a chat notice; never a 500), and a ProviderError to the
    agent loop (which fails the run with this message as its reason, before the model is
    called); the `llm` tool knows it as QuotaRefused (an error result and an event)."""

    def __init__(
        self,
        rule: Rule,
        used: int,
        resets_at: datetime,
        now: datetime | None = None,
        wanted: int = 0,
    ):
        self.rule, self.used, self.resets_at = rule, used, resets_at
        now = now or timezone.now()
        self.retry_after_s = max(1, math.ceil((resets_at - now).total_seconds()))
        period = "day" if rule.period == QuotaPeriod.DAY else "month"
        spent = f"{_amount(rule, used)} used of {_amount(rule, rule.limit)} this {period}"
        if used >= rule.limit:
            why = f"is used up ({spent})"
        else:  # what is left is less than the call may use (its estimate)
            why = f"cannot take this call (up to {_amount(rule, wanted)} more; {spent})"
        local = resets_at.astimezone(_zone(rule.time_zone))
        self.text = (
            f"Quota exceeded: {rule.label} {why}. It resets at {local:%Y-%m-%d %H:%M} "
            f"{rule.time_zone or 'UTC'} (in {_duration(self.retry_after_s)})."
        )
        ValidationError.__init__(self, self.text, code="quota_exceeded")

    def __str__(self) -> str:
        return self.text

    def details(self) -> dict[str, Any]:
        """What the API adds to its error body."""
        return {
            "quota_id": self.rule.id,
            "scope": self.rule.scope,
            "metric": self.rule.metric,
            "period": self.rule.period,
            "limit": _number(self.rule, self.rule.limit),
            "used": _number(self.rule, self.used),
            "resets_at": utc_text(self.resets_at),
            "time_zone": self.rule.time_zone,
            "retry_after_s": self.retry_after_s,
        }


def utc_text(moment: datetime) -> str:
    """An instant as the API writes it: ISO 8601 in UTC (`...Z`)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


_RESETS = re.compile(r"It resets at (\d{4}-\d\d-\d\d \d\d:\d\d) ([A-Za-z0-9_+\-/]+) \(in ")


def refusal_retry_after(error: str, now: datetime | None = None) -> int | None:
    """For a run that failed on a refusal (its error holds QuotaExceeded's text): the
    seconds until the limit resets; None for any other failure."""
    found = _RESETS.search(error or "") if "Quota exceeded: " in (error or "") else None
    if found is None:
        return None
    zone = _zone(found.group(2))
    at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M").replace(tzinfo=zone)
    return max(1, math.ceil((at - (now or timezone.now())).total_seconds()))


def _number(rule: Rule, units: int) -> int | float:
    return float(Decimal(units) / MICROS) if rule.metric == QuotaMetric.COST else units


def _amount(rule: Rule, units: int) -> str:
    if rule.metric == QuotaMetric.COST:
        return f"${Decimal(max(units, 0)) / MICROS:.2f}"
    return f"{max(units, 0):,} tokens"


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes = max(1, math.ceil(rest / 60)) if not (days or hours) else rest // 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min"


# -- reserve and settle ----------------------------------------------------------------------
# KEYS: the counters; ARGV: per key its limit, then the amount to add. A missing key answers
# {-1, i} (seed it, then ask again); one that cannot take its amount {0, i, used}; else
# every key takes its amount: {1}. Atomic as one command: concurrent calls see each other.
_RESERVE = """
for i, key in ipairs(KEYS) do
  local used = redis.call('GET', key)
  if not used then return {-1, i} end
  used = tonumber(used)
  local limit = tonumber(ARGV[2 * i - 1])
  if used >= limit or used + tonumber(ARGV[2 * i]) > limit then return {0, i, used} end
end
for i, key in ipairs(KEYS) do
  redis.call('INCRBY', key, ARGV[2 * i])
end
return {1}
"""
# KEYS: the counters; ARGV: per key what to add (negative gives back). Never below zero, and
# never recreating a key that expired meanwhile.
_SETTLE = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    if redis.call('INCRBY', key, ARGV[i]) < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
  end
end
return 1
"""


@dataclass
class Reservation:
    """What `reserve` added: per counter key, the metric and amount (settle adjusts them)."""

    held: list[tuple[str, str, int]] = field(default_factory=list)  # (key, metric, amount)

    @property
    def empty(self) -> bool:
        return not self.held


Cost = Decimal | Callable[[], Decimal | None] | None  # dollars, or how to find them (it may query)


def _dollars(rules: list[Rule] | list[str], cost_usd: Cost) -> Decimal | None:
    """The cost, priced only when a cost limit needs it (a price lookup may query)."""
    metrics = [r.metric if isinstance(r, Rule) else r for r in rules]
    if not callable(cost_usd):
        return cost_usd
    return cost_usd() if QuotaMetric.COST in metrics else None


def _units(metric: str, tokens: int, cost_usd: Decimal | None) -> int:
    if metric == QuotaMetric.TOKENS:
        return max(int(tokens), 0)
    if cost_usd is None:
        return 0  # no price known: a cost limit still refuses once it is used up
    return max(int((cost_usd * MICROS).to_integral_value(ROUND_CEILING)), 0)


def applicable(meter: Meter) -> list[Rule]:
    return [rule for rule in tenant_rules(meter.tenant_id) if rule.applies_to(meter)]


def reserve(
    meter: Meter,
    *,
    tokens: int,
    cost_usd: Cost = None,
    now: datetime | None = None,
) -> Reservation:
    """Hold `tokens` (and `cost_usd`) against every limit that applies to `meter`, or raise
    QuotaExceeded naming the first that cannot take them (nothing held then). One Redis
    round trip, and one query per counter Redis does not have yet."""
    rules = applicable(meter)
    if not rules:
        return Reservation()
    now = now or timezone.now()
    cost_usd = _dollars(rules, cost_usd)
    bounds = {rule.id: period_bounds(rule.period, now, rule.time_zone) for rule in rules}
    keys = [_key(rule, bounds[rule.id][0]) for rule in rules]
    amounts = [_units(rule.metric, tokens, cost_usd) for rule in rules]
    args = [n for rule, amount in zip(rules, amounts, strict=True) for n in (rule.limit, amount)]
    script = _script(_RESERVE)
    for _ in range(len(rules) + 1):
        try:
            answer = script(keys=keys, args=args)
        except RedisError:
            # Without Redis nothing can be counted: the call goes ahead (fail open, logged)
            # rather than every model call of the platform failing with it.
            logger.exception("quotas: Redis unreachable, %d limits not enforced", len(keys))
            return Reservation()
        verdict = int(answer[0])
        if verdict == 1:
            return Reservation(
                [
                    (key, rule.metric, amount)
                    for key, rule, amount in zip(keys, rules, amounts, strict=True)
                ]
            )
        rule = rules[int(answer[1]) - 1]
        if verdict == 0:
            wanted = amounts[int(answer[1]) - 1]
            raise QuotaExceeded(rule, int(answer[2]), bounds[rule.id][1], now, wanted)
        start, end = bounds[rule.id]
        ttl = int((end - now).total_seconds()) + KEEP_AFTER_PERIOD_S
        seed = recorded_usage(rule, start)
        versions.shared_redis().set(keys[int(answer[1]) - 1], seed, ex=ttl, nx=True)
    raise RuntimeError("quota counters could not be seeded")  # (each pass seeds one key)


@lru_cache(maxsize=8)
def _script(source: str):
    """The script as redis-py runs it: EVALSHA, loading it when Redis lacks it."""
    return versions.shared_redis().register_script(source)


def settle(reservation: Reservation, *, tokens: int, cost_usd: Decimal | None = None) -> None:
    """Replace what `reservation` held by what was used (`tokens`, `cost_usd`). A call that
    failed before using anything settles with zeros: its whole reservation comes back."""
    if reservation.empty:
        return
    keys = [key for key, _, _ in reservation.held]
    cost_usd = _dollars([metric for _, metric, _ in reservation.held], cost_usd)
    deltas = [_units(metric, tokens, cost_usd) - held for _, metric, held in reservation.held]
    try:
        _script(_SETTLE)(keys=keys, args=deltas)
    except RedisError:
        logger.exception("quotas: Redis unreachable, a settlement was lost")
    reservation.held = []


async def reserve_async(meter: Meter, **kwargs: Any) -> Reservation:
    """`reserve` from async code: nothing to hold (no limit applies, known without a query)
    answers on the loop; otherwise on a thread (Redis, and maybe a seeding query)."""
    known = _known_rules(meter.tenant_id)
    if known is not None and not any(rule.applies_to(meter) for rule in known):
        return Reservation()
    return await stream_read(reserve)(meter, **kwargs)


async def settle_async(reservation: Reservation, **kwargs: Any) -> None:
    if not reservation.empty:
        await stream_read(settle)(reservation, **kwargs)


def recorded_usage(rule: Rule, start: datetime) -> int:
    """What PostgreSQL has recorded against `rule` since `start`: the counter's starting
    value. Tokens leave crew runs out (theirs are their children's, counted already);
    `cost_usd` is each run's own calls, so every run counts. One query."""
    runs = Run.objects.filter(tenant_id=rule.tenant_id, created_at__gte=start)
    if rule.scope == QuotaScope.MEMBER:
        runs = runs.filter(initiated_by_user_id=rule.target_id)
    elif rule.scope == QuotaScope.API_KEY:
        runs = runs.filter(initiated_by_api_key_id=rule.target_id)
    elif rule.scope == QuotaScope.AGENT:
        runs = runs.filter(agent_id=rule.target_id)
    with rls.tenant_scope(rule.tenant_id):
        if rule.metric == QuotaMetric.TOKENS:
            total = runs.filter(crew__isnull=True).aggregate(
                n=Sum(F("input_tokens") + F("output_tokens"))
            )["n"]
            return int(total or 0)
        total = runs.aggregate(n=Sum("cost_usd"))["n"]
        return _units(QuotaMetric.COST, 0, Decimal(total or 0))


def check(meter: Meter, *, tokens: int = 1, now: datetime | None = None) -> None:
    """Refuse (QuotaExceeded) when a limit that applies to `meter` has less than `tokens`
    left, holding nothing: the check a run start makes, before the run exists. The model
    calls of the run then reserve for themselves."""
    reservation = reserve(meter, tokens=tokens, now=now)
    settle(reservation, tokens=0)


def used(quota: Quota, now: datetime | None = None) -> int | float:
    """What is used of `quota` in its current period (its counter; the recorded usage when
    Redis has none yet), in tokens or dollars."""
    rule = _rule(quota)
    start, _ = period_bounds(rule.period, now, rule.time_zone)
    value = versions.shared_redis().get(_key(rule, start))
    units = int(value) if value is not None else recorded_usage(rule, start)
    return _number(rule, units)


def resets_at(quota: Quota, now: datetime | None = None) -> datetime:
    """When the quota's current period ends (in its tenant's zone; one query unless the
    quota was read with its tenant)."""
    return period_bounds(quota.period, now, quota.tenant.time_zone)[1]


# -- the model calls of a run -----------------------------------------------------------------
def call_cost(
    tenant_id: int,
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Callable[[], Decimal | None]:
    """What a call to `model` costs at the tenant's prices (`provider`: a run's recorded
    provider, "openai_compatible:xai"), to be found when a cost limit needs it; None when no
    price is known (cost limits then count nothing for it, but still refuse once used up)."""

    def priced() -> Decimal | None:
        price = price_for(tenant_id, provider, model)
        if price is None:
            return None
        return cost_of(price, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)

    return priced


def _tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens


async def reserve_call(
    meter: Meter, price_kind: str, model: str, input_tokens: int, output_tokens: int
) -> Reservation:
    """Hold what a call to `model` may use (`input_tokens` and at most `output_tokens`,
    priced at `price_kind`, a connection's price kind or a run's recorded provider, when a
    cost limit needs it) against `meter`'s limits; QuotaExceeded when one cannot take it."""
    return await reserve_async(
        meter,
        tokens=input_tokens + output_tokens,
        cost_usd=call_cost(meter.tenant_id, price_kind, model, input_tokens, output_tokens),
    )


async def reserve_request(meter: Meter, request: ModelRequest, price_kind: str) -> Reservation:
    """`reserve_call` for `request`: its input estimate plus its `max_tokens`."""
    estimate = estimate_input_tokens(request)
    return await reserve_call(meter, price_kind, request.model, estimate, request.max_tokens)


async def settle_usage(
    reservation: Reservation, tenant_id: int, price_kind: str, model: str, usage: Usage
) -> None:
    """Replace `reservation` by `usage` of `model`, priced as the call's record prices it
    (providers.pricing.usage_cost: the same price, the same four counts)."""
    await settle_async(
        reservation,
        tokens=_tokens(usage),
        cost_usd=call_cost(
            tenant_id,
            price_kind,
            model,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        ),
    )


class MeteredAdapter:
    """A model adapter whose every call first reserves against the meter's limits and then
    settles with the usage the provider reported. A refusal raises QuotaExceeded before
    the model is called (the loop fails the run with it as the reason). `price_kind`: the
    price table its calls are recorded at (default: the adapter's provider, as a run's)."""

    def __init__(self, adapter: Any, meter: Meter, price_kind: str | None = None) -> None:
        self._adapter = adapter
        self._meter = meter
        self.provider = adapter.provider
        self._price_kind = price_kind or adapter.provider

    def __getattr__(self, name: str) -> Any:
        return getattr(self._adapter, name)

    async def _settle(self, reservation: Reservation, model: str, usage: Usage) -> None:
        await settle_usage(reservation, self._meter.tenant_id, self._price_kind, model, usage)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        reservation = await reserve_request(self._meter, request, self._price_kind)
        usage = Usage()
        try:
            response = await self._adapter.complete(request)
            usage = response.usage
            return response
        finally:
            await self._settle(reservation, request.model, usage)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The adapter's stream. Settled with the usage its end (`Done`) gives; a stream that
        ends before it (the caller closed it: a cancelled run; the provider broke off) is
        settled at what it gave, never below: the input estimate and the output's characters
        / 4 (`cut_usage`, as the loop records it), or nothing if it gave nothing."""
        reservation = await reserve_request(self._meter, request, self._price_kind)
        usage, text, calls = None, [], []
        try:
            async for event in self._adapter.stream(request):
                if isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, ToolCallEvent):
                    calls.append(event.call)
                elif isinstance(event, Done):
                    usage = event.response.usage
                yield event
        finally:
            if usage is None:
                usage = cut_usage(request, "".join(text), calls)
            await self._settle(reservation, request.model, usage)


def metered(adapter: Any, meter: Meter, price_kind: str | None = None) -> Any:
    return MeteredAdapter(adapter, meter, price_kind) if adapter is not None else None


class ToolModelCalls:
    """The model calls a tool's handler makes itself (the `llm` built-in), held against the
    limits of whoever caused them: `RunContext.model_calls` (tools.runtime.context). A run's
    tools are metered for the run (its tenant, member, key and agent); a direct call's for
    its caller."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    async def reserve(self, request: ModelRequest, *, price_kind: str) -> Reservation:
        return await reserve_request(self.meter, request, price_kind)

    async def settle(
        self,
        held: Reservation,
        *,
        price_kind: str,
        model: str,
        usage: Usage | None,
        connection: str = "",
    ) -> None:
        """`model`: the one the call's `tool.usage` names (agents.runs.costs prices it)."""
        await settle_usage(held, self.meter.tenant_id, price_kind, model, usage or Usage())
