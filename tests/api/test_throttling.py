"""API budgets (tenancy/request_budgets.py; a session's tenant: api/throttling.py): atomic
counting, and only verified tenants are charged."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from agentplatform.api.throttling import SessionTenantRateThrottle
from tenancy import request_budgets, services
from tenancy.authentication import ApiClient
from tests.api.test_resources import Api, as_key, assert_error
from tests.web.test_pages import login


def new_key(tenant):
    key, _ = services.api_key_create(tenant=tenant, name="t", scopes=["read"])
    assert key.tenant == tenant  # loaded here: the threads below see no test transaction
    return key


def test_thirty_concurrent_requests_admit_exactly_the_limit(trio, rates):
    rates("10/min", "1000/min")
    key = new_key(trio.acme)
    request = Request(APIRequestFactory().get("/api/v1/agents"))
    request.user = ApiClient(key)

    def one(_) -> bool:
        return request_budgets.ApiKeyRateThrottle().allow_request(request, None)

    with ThreadPoolExecutor(30) as pool:
        admitted = list(pool.map(one, range(30)))
    assert admitted.count(True) == 10


def test_the_tenant_budget_is_atomic_too(trio, rates):
    rates("1000/min", "10/min")
    keys = [new_key(trio.acme) for _ in range(3)]

    def one(i: int) -> bool:
        request = Request(APIRequestFactory().get("/api/v1/agents"))
        request.user = ApiClient(keys[i % 3])  # three keys, one tenant budget
        return request_budgets.TenantRateThrottle().allow_request(request, None)

    with ThreadPoolExecutor(30) as pool:
        admitted = list(pool.map(one, range(30)))
    assert admitted.count(True) == 10


def test_another_tenants_user_naming_acme_does_not_spend_acmes_budget(client, trio, rates):
    rates("1000/min", "3/min")
    outsider = Api(login(client, trio.charlie), tenant_header="acme")
    for _ in range(5):  # whoami answers any signed-in user, whatever X-Tenant names
        assert outsider.get("/whoami").status_code == 200
        assert_error(outsider.get("/agents"), 404)
    client.logout()
    alice = Api(login(client, trio.alice), tenant_header="acme")
    assert [alice.get("/agents").status_code for _ in range(3)] == [200, 200, 200]
    refused = alice.get("/agents")
    error = assert_error(refused, 429)
    assert int(refused["Retry-After"]) > 0 and error["details"]["retry_after_s"] > 0


@pytest.mark.parametrize("spent", ["key", "tenant"])
def test_a_rest_request_counts_both_budgets_in_one_round_trip(client, trio, rates, spent):
    """The key's budget and its tenant's: either one spent refuses the call; one script
    call a request for both."""
    from base.versions import shared_redis

    def scripts_run() -> int:
        stats = shared_redis().info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))

    rates(*(("2/min", "1000/min") if spent == "key" else ("1000/min", "2/min")))
    api = as_key(client, trio.acme, "read")
    before = scripts_run()
    assert [api.get("/agents").status_code for _ in range(2)] == [200, 200]
    assert scripts_run() - before == 2
    refused = api.get("/agents")
    assert_error(refused, 429)
    assert int(refused["Retry-After"]) > 0


def test_a_v1_call_with_no_budget_set_asks_redis_nothing(rates):
    """Budgets off (no rate): the async check answers at once, with no script call for no
    windows."""
    import asyncio

    from base.versions import shared_redis

    def scripts_run() -> int:
        stats = shared_redis().info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))

    rates(None, None)
    throttles = [request_budgets.ApiKeyRateThrottle(), request_budgets.TenantRateThrottle()]
    before = scripts_run()
    assert asyncio.run(request_budgets.retry_after(object(), throttles)) is None
    assert scripts_run() == before


def test_an_unverified_slug_is_counted_against_the_user_only(trio):
    request = Request(APIRequestFactory().get("/api/v1/whoami", HTTP_X_TENANT="acme"))
    request.user = trio.charlie
    assert SessionTenantRateThrottle().get_cache_key(request, None) is None
    assert request_budgets.ApiKeyRateThrottle().get_cache_key(request, None) == (
        f"throttle:user:{trio.charlie.pk}"
    )
    request = Request(APIRequestFactory().get("/api/v1/whoami", HTTP_X_TENANT="acme"))
    request.user = trio.bob  # a member: acme's budget
    assert SessionTenantRateThrottle().get_cache_key(request, None) == (
        f"throttle:tenant:{trio.acme.pk}"
    )


def test_hits_of_one_moment_share_a_round_trip_and_keep_distinct_counts():
    """rate_counters.hits_async: sixty requests of one event loop at once, over two keys,
    get the counts 1..n of each key, exactly once each, in fewer round trips than hits."""
    import asyncio

    from base import rate_counters
    from base.versions import shared_redis

    def scripts_run() -> int:
        stats = shared_redis().info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))

    for name in ("moment:a", "moment:b"):
        rate_counters.reset(name)
    counted = rate_counters.hits

    async def sixty():
        return await asyncio.gather(
            *(rate_counters.hits_async([(f"moment:{'ab'[i % 2]}", 60)]) for i in range(60))
        )

    before = scripts_run()
    found = asyncio.run(sixty())
    trips = scripts_run() - before
    values = {"a": [], "b": []}
    for i, (count,) in enumerate(found):
        values["ab"[i % 2]].append(count.value)
        assert 1 <= count.retry_after_s <= 60
    assert sorted(values["a"]) == list(range(1, 31)) == sorted(values["b"])
    assert 1 <= trips < 60
    # The same name twice in one call: consecutive counts, in order.
    assert [c.value for c in counted([("moment:a", 60), ("moment:a", 60)])] == [31, 32]
