"""An owner's request that the workspace be erased (lifecycle/erasure_requests.py, the page
`/t/<tenant>/erasure/`), which an operator confirms: `manage.py tenant requests` lists it,
the Django admin's action (superusers only) erases the tenant."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client

from lifecycle.models import TenantErasureRequest
from tenancy.models import AuditEntry, Role, Tenant
from tests.factories import add_member, login, make_user

pytestmark = pytest.mark.django_db
PAGE = "/t/acme/erasure/"


def test_an_owner_asks_after_typing_the_slug_and_may_withdraw(trio):
    client = login(Client(), trio.alice)
    assert b"Ask for the erasure" in client.get(PAGE).content
    wrong = client.post(PAGE, {"action": "request", "confirm": "globex"})
    assert wrong.status_code == 400 and not TenantErasureRequest.objects.exists()
    assert (
        client.post(PAGE, {"action": "request", "confirm": "acme", "reason": "moving"}).status_code
        == 302
    )
    client.post(PAGE, {"action": "request", "confirm": "acme"})  # again: the same request
    pending = TenantErasureRequest.objects.get()
    assert (pending.tenant, pending.requested_by, pending.reason) == (
        trio.acme,
        trio.alice,
        "moving",
    )
    assert AuditEntry.objects.filter(tenant=trio.acme, details__erasure_requested=True).count() == 1
    assert b"erasure-pending" in client.get(PAGE).content
    assert Tenant.objects.get(pk=trio.acme.pk).active  # nothing is erased by asking
    client.post(PAGE, {"action": "withdraw"})
    assert not TenantErasureRequest.objects.exists()


def test_an_admin_sees_the_page_but_may_not_ask_and_a_member_may_not_see_it(trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    admin = login(Client(), dana)
    assert b"Only an owner" in admin.get(PAGE).content
    assert admin.post(PAGE, {"action": "request", "confirm": "acme"}).status_code == 403
    assert login(Client(), trio.bob).get(PAGE).status_code == 403
    assert login(Client(), trio.charlie).get(PAGE).status_code == 404
    assert not TenantErasureRequest.objects.exists()


def test_the_operator_lists_the_requests_and_confirms_one_in_the_admin(trio):
    login(Client(), trio.alice).post(
        PAGE, {"action": "request", "confirm": "acme", "reason": "bye"}
    )
    out = io.StringIO()
    call_command("tenant", "requests", stdout=out)
    assert out.getvalue().startswith("acme\t") and "alice\tbye" in out.getvalue()
    root = make_user("root", is_staff=True, is_superuser=True)
    admin = login(Client(), root)
    pending = TenantErasureRequest.objects.get()
    answer = admin.post(
        "/admin/lifecycle/tenanterasurerequest/",
        {"action": "erase_tenants", "_selected_action": [pending.pk]},
    )
    assert answer.status_code == 302
    assert not Tenant.objects.filter(slug="acme").exists()
    assert Tenant.objects.filter(slug="globex").exists()
