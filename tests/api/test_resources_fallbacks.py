"""An agent's fallbacks and load balancing over REST, per role: the tenant's admin sets
them (refused with the path when a connection is unknown), a member may not, another
tenant's agent is a 404, and without credentials a 401."""

from __future__ import annotations

from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login, make_agent, make_connection

FALLBACKS = [{"connection": "Backup", "model": "gpt-b"}]


def setup_acme(trio) -> None:
    make_connection(trio.acme, "Main", default_model="m", is_default=True)
    make_connection(trio.acme, "Backup", default_model="gpt-b")
    make_agent(trio.acme, "helper")


def test_an_admin_sets_fallbacks_and_balancing(client, trio):
    setup_acme(trio)
    api = as_key(client, trio.acme)
    changed = api.patch(
        "/agents/helper", {"fallbacks": FALLBACKS, "load_balancing": "least_in_flight"}
    )
    assert changed.status_code == 200, changed.content
    body = api.get("/agents/helper").json()
    assert body["fallbacks"] == FALLBACKS and body["load_balancing"] == "least_in_flight"


def test_an_unknown_fallback_connection_is_a_400_naming_it(client, trio):
    setup_acme(trio)
    api = as_key(client, trio.acme)
    error = assert_error(
        api.patch("/agents/helper", {"fallbacks": [{"connection": "Nowhere", "model": "x"}]}),
        400,
    )
    assert "fallbacks" in error["details"]
    assert "unknown connection 'Nowhere'" in str(error["details"]["fallbacks"])
    assert api.get("/agents/helper").json()["fallbacks"] == []


def test_a_malformed_fallback_list_is_a_400(client, trio):
    setup_acme(trio)
    api = as_key(client, trio.acme)
    for value in ("Backup", [{"model": "x"}], [{"connection": "Backup", "weight": 1}]):
        error = assert_error(api.patch("/agents/helper", {"fallbacks": value}), 400)
        assert "fallbacks" in error["details"]
    error = assert_error(api.patch("/agents/helper", {"load_balancing": "random"}), 400)
    assert "load_balancing" in error["details"]


def test_another_tenants_connection_is_unknown(client, trio):
    setup_acme(trio)
    make_connection(trio.globex, "Theirs", default_model="x")
    api = as_key(client, trio.acme)
    error = assert_error(
        api.patch("/agents/helper", {"fallbacks": [{"connection": "Theirs"}]}), 400
    )
    assert "unknown connection 'Theirs'" in str(error["details"]["fallbacks"])


def test_a_member_may_not_set_fallbacks(client, trio):
    setup_acme(trio)
    login(client, trio.bob)
    api = Api(client, tenant_header=trio.acme.slug)
    response = api.patch("/agents/helper", {"fallbacks": FALLBACKS})
    assert response.status_code == 403, response.content


def test_another_tenants_agent_is_a_404(client, trio):
    setup_acme(trio)
    api = as_key(client, trio.globex)
    assert_error(api.patch("/agents/helper", {"fallbacks": FALLBACKS}), 404)


def test_without_credentials_it_is_a_401(client, trio):
    setup_acme(trio)
    response = Api(client).patch("/agents/helper", {"fallbacks": FALLBACKS})
    assert response.status_code == 401
