"""`/api/v1/quotas`: admins set limits (validated, 400s naming the field), members and
read keys read them, other tenants' answer 404, what is used comes with each."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents import quotas
from agents.models import Quota
from tenancy import services as tenancy
from tenancy.models import AuditEntry, Role
from tests.api.test_runs_api import client_for
from tests.factories import add_member, make_agent, make_user

pytestmark = pytest.mark.django_db
URL = "/api/v1/quotas"


def session(user, tenant="acme") -> APIClient:
    client = APIClient()
    client.force_login(user)
    client.credentials(HTTP_X_TENANT=tenant)
    return client


def test_an_admin_sets_each_kind_of_limit_and_reads_what_is_used(trio):
    make_agent(trio.acme, "assistant")
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    alice = session(trio.alice)
    bodies = [
        {"scope": "tenant", "metric": "cost", "period": "month", "limit": "250.00"},
        {"scope": "member", "member": "bob", "metric": "tokens", "period": "day", "limit": 1000},
        {"scope": "api_key", "api_key": key.pk, "metric": "tokens", "period": "day",
         "limit": 5000},
        {"scope": "agent", "agent": "assistant", "metric": "cost", "period": "day", "limit": 3},
    ]  # fmt: skip
    created = []
    for body in bodies:
        response = alice.post(URL, body, format="json")
        assert response.status_code == 201, response.json()
        created.append(response.json())
    assert created[0]["label"] == "the monthly limit of $250.00 for the tenant"
    assert created[1]["member"] == "bob" and created[1]["used"] == 0
    assert created[2]["api_key"] == key.pk and created[2]["label"].endswith("API key 'ci'")
    assert created[3]["agent"] == "assistant" and created[3]["resets_at"].endswith("T00:00:00Z")
    tomorrow = timezone.now().date() + timedelta(days=1)  # (the tenant's zone: UTC)
    assert created[3]["resets_at"] == f"{tomorrow.isoformat()}T00:00:00Z"  # a daily limit

    quotas.reserve(quotas.Meter(trio.acme.pk, user_id=trio.bob.pk), tokens=120)
    bobs = alice.get(f"{URL}/{created[1]['id']}").json()
    assert bobs["used"] == 120
    assert [q["id"] for q in alice.get(f"{URL}?scope=member").json()["results"]] == [bobs["id"]]

    changed = alice.patch(f"{URL}/{bobs['id']}", {"limit": 2000}, format="json")
    assert changed.status_code == 200 and changed.json()["limit"] == "2000.000000"
    assert alice.delete(f"{URL}/{bobs['id']}").status_code == 204
    assert not Quota.objects.filter(pk=bobs["id"]).exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"scope": "member", "metric": "tokens", "period": "day", "limit": 5}, "user"),
        ({"scope": "member", "member": "charlie", "metric": "tokens", "period": "day",
          "limit": 5}, "member"),
        ({"scope": "agent", "agent": "nobody", "metric": "tokens", "period": "day",
          "limit": 5}, "agent"),
        ({"scope": "api_key", "api_key": 999999, "metric": "tokens", "period": "day",
          "limit": 5}, "api_key"),
        ({"scope": "tenant", "metric": "tokens", "period": "day", "limit": "1.5"}, "limit"),
        ({"scope": "tenant", "metric": "tokens", "period": "day", "limit": -1}, "limit"),
        ({"scope": "tenant", "metric": "tokens", "period": "week", "limit": 5}, "period"),
        ({"scope": "team", "metric": "tokens", "period": "day", "limit": 5}, "scope"),
        ({"scope": "tenant", "metric": "tokens", "period": "day", "limit": 5, "x": 1}, "x"),
    ],
)  # fmt: skip
def test_bad_limits_are_400s_naming_the_field(trio, body, field):
    response = session(trio.alice).post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"]
    assert not Quota.objects.exists()


def test_a_second_limit_of_the_same_target_metric_and_period_is_refused(trio):
    alice = session(trio.alice)
    body = {"scope": "tenant", "metric": "tokens", "period": "day", "limit": 5}
    assert alice.post(URL, body, format="json").status_code == 201
    again = alice.post(URL, body, format="json")
    assert again.status_code == 400 and Quota.objects.count() == 1
    assert "already has a limit of that metric and period" in str(again.json())


def test_each_change_of_a_limit_is_in_the_audit_log_with_who_made_it(trio):
    alice = session(trio.alice)
    body = {"scope": "tenant", "metric": "tokens", "period": "day", "limit": 5}
    quota = alice.post(URL, body, format="json").json()
    alice.patch(f"{URL}/{quota['id']}", {"limit": 6}, format="json")
    alice.delete(f"{URL}/{quota['id']}")
    entries = AuditEntry.objects.filter(object_type="agents.quota", object_id=str(quota["id"]))
    assert sorted(entries.values_list("action", "user_id")) == sorted(
        [
            ("config.created", trio.alice.pk),
            ("config.changed", trio.alice.pk),
            ("config.deleted", trio.alice.pk),
        ]
    )


def test_members_and_read_keys_read_but_only_admins_change(trio):
    quota = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=100
    )
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    _, config = tenancy.api_key_create(tenant=trio.acme, name="cfg", scopes=["read", "config"])
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    body = {"limit": 5}
    for reader in (session(trio.bob), client_for(read)):
        assert reader.get(f"{URL}/{quota.pk}").status_code == 200
        assert reader.patch(f"{URL}/{quota.pk}", body, format="json").status_code == 403
        assert reader.delete(f"{URL}/{quota.pk}").status_code == 403
    for writer in (session(dana), client_for(config)):
        assert writer.patch(f"{URL}/{quota.pk}", body, format="json").status_code == 200
    assert APIClient().get(URL, HTTP_X_TENANT="acme").status_code in (401, 403)


def test_another_tenants_quota_answers_404(trio):
    theirs = Quota.objects.create(
        tenant=trio.globex, scope="tenant", metric="tokens", period="day", limit=100
    )
    alice = session(trio.alice)
    assert alice.get(f"{URL}/{theirs.pk}").status_code == 404
    assert alice.patch(f"{URL}/{theirs.pk}", {"limit": 1}, format="json").status_code == 404
    assert alice.delete(f"{URL}/{theirs.pk}").status_code == 404
    assert alice.get(f"{URL}/abc").status_code == 404
    assert alice.get(URL).json()["results"] == []
    # Nor can a limit name another tenant's member, key or agent.
    make_agent(trio.globex, "spy")
    key, _ = tenancy.api_key_create(tenant=trio.globex, name="gx", scopes=["read"])
    for body in ({"scope": "agent", "agent": "spy"}, {"scope": "api_key", "api_key": key.pk}):
        body |= {"metric": "tokens", "period": "day", "limit": 5}
        assert alice.post(URL, body, format="json").status_code == 400


def test_a_limit_moved_to_another_scope_keeps_only_that_scopes_target(trio):
    """A change that names the scope keeps that scope's target and clears the others (a
    member limit made the tenant's stops naming the member); a new limit naming another
    scope's target is refused, naming the field."""
    make_agent(trio.acme, "assistant")
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read"])
    alice = session(trio.alice)
    targets = [
        ({"scope": "member", "member": "bob", "metric": "tokens", "period": "day"}, "bob"),
        ({"scope": "api_key", "api_key": key.pk, "metric": "tokens", "period": "month"}, key.pk),
        ({"scope": "agent", "agent": "assistant", "metric": "cost", "period": "day"}, "assistant"),
    ]
    for body, target in targets:
        scope = body["scope"]
        created = alice.post(URL, {**body, "limit": 9}, format="json").json()
        same = alice.patch(f"{URL}/{created['id']}", {"scope": scope, "limit": 8}, format="json")
        assert same.status_code == 200, same.json()
        assert same.json()[scope] == target  # its own scope's target kept
        to_tenant = alice.patch(f"{URL}/{created['id']}", {"scope": "tenant"}, format="json")
        assert to_tenant.status_code == 200, to_tenant.json()
        assert to_tenant.json()["label"].endswith("for the tenant")
        quota = Quota.objects.get(pk=created["id"])
        assert (quota.user_id, quota.api_key_id, quota.agent_id) == (None, None, None)

    moved = alice.post(URL, {**targets[0][0], "limit": 9}, format="json").json()
    to_agent = alice.patch(
        f"{URL}/{moved['id']}", {"scope": "agent", "agent": "assistant"}, format="json"
    )
    assert to_agent.status_code == 200, to_agent.json()
    assert (to_agent.json()["member"], to_agent.json()["agent"]) == (None, "assistant")

    stray = {**targets[0][0], "scope": "tenant", "metric": "cost", "period": "month", "limit": 1}
    refused = alice.post(URL, stray, format="json")  # names bob, yet the tenant's
    assert refused.status_code == 400 and "user" in refused.json()["error"]["details"]
