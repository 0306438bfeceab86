"""A tenant owner/admin sees and edits only their tenant's rows in /admin/."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tenancy import services
from tenancy.api_keys import find_usable_key
from tenancy.models import ApiKey, AuditAction, AuditEntry, Membership, Role
from tests.factories import PASSWORD, add_member, login, make_user
from tests.scoping.models import Project, Ticket


@pytest.fixture
def rows(trio):
    ours = Project.objects.create(tenant=trio.acme, name="acme-roadmap")
    theirs = Project.objects.create(tenant=trio.globex, name="globex-plans")
    their_ticket = Ticket.objects.create(tenant=trio.globex, project=theirs, title="globex-ticket")
    return ours, theirs, their_ticket


def test_tenant_admin_lists_only_their_rows(client, trio, rows):
    body = login(client, trio.alice).get("/admin/scoping/project/").content.decode()
    assert "acme-roadmap" in body
    assert "globex-plans" not in body
    body = client.get("/admin/tenancy/tenant/").content.decode()
    assert "Acme" in body and "Globex" not in body


def test_tenant_admin_cannot_open_edit_delete_or_history_another_tenants_row(client, trio, rows):
    _, theirs, their_ticket = rows
    login(client, trio.alice)
    for url in [
        f"/admin/scoping/project/{theirs.pk}/change/",
        f"/admin/scoping/project/{theirs.pk}/delete/",
        f"/admin/scoping/project/{theirs.pk}/history/",
        f"/admin/scoping/ticket/{their_ticket.pk}/change/",
        f"/admin/tenancy/tenant/{trio.globex.pk}/change/",
    ]:
        assert client.get(url).status_code == 404, url
    response = client.post(
        f"/admin/scoping/project/{theirs.pk}/change/", {"name": "pwned", "tenant": trio.acme.pk}
    )
    assert response.status_code == 404
    response = client.post(f"/admin/scoping/project/{theirs.pk}/delete/", {"post": "yes"})
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert (theirs.name, theirs.tenant_id) == ("globex-plans", trio.globex.pk)


def test_bulk_delete_cannot_reach_another_tenants_rows(client, trio, rows):
    ours, theirs, _ = rows
    login(client, trio.alice).post(
        "/admin/scoping/project/",
        {"action": "delete_selected", "_selected_action": [ours.pk, theirs.pk], "post": "yes"},
    )
    assert Project.objects.filter(pk=theirs.pk).exists()
    assert not Project.objects.filter(pk=ours.pk).exists()  # the action did run


def test_single_tenant_admin_creates_rows_in_their_tenant_whatever_is_posted(client, trio, rows):
    response = login(client, trio.alice).post(
        "/admin/scoping/project/add/",
        {"name": "new", "tenant": trio.globex.pk, **_inline_management()},
    )
    assert response.status_code == 302
    assert Project.objects.get(name="new").tenant == trio.acme


def test_foreign_keys_to_another_tenants_rows_are_neither_offered_nor_accepted(client, trio, rows):
    ours, theirs, _ = rows
    login(client, trio.alice)
    form = client.get("/admin/scoping/ticket/add/").content.decode()
    assert "acme-roadmap" in form and "globex-plans" not in form
    response = client.post(
        "/admin/scoping/ticket/add/",
        {"title": "sneaky", "project": theirs.pk, "watchers": [theirs.pk]},
    )
    assert response.status_code == 200  # the form again, with errors
    assert not Ticket.objects.filter(title="sneaky").exists()
    response = client.post("/admin/scoping/ticket/add/", {"title": "fine", "project": ours.pk})
    assert response.status_code == 302
    assert Ticket.objects.get(title="fine").tenant == trio.acme


def test_admin_of_two_tenants_cannot_mix_them_or_move_rows(client, trio, rows):
    ours, theirs, _ = rows
    add_member(trio.globex, trio.alice, Role.ADMIN)
    login(client, trio.alice)
    response = client.post(
        "/admin/scoping/ticket/add/",
        {"title": "mixed", "tenant": trio.acme.pk, "project": theirs.pk},
    )
    assert response.status_code == 200
    assert not Ticket.objects.filter(title="mixed").exists()
    # the tenant of a saved row is read-only
    client.post(
        f"/admin/scoping/project/{ours.pk}/change/",
        {"name": "renamed", "tenant": trio.globex.pk, **_inline_management()},
    )
    ours.refresh_from_db()
    assert (ours.name, ours.tenant_id) == ("renamed", trio.acme.pk)
    # a third tenant is not offered
    other = make_user("dora")
    from tests.factories import make_tenant

    initech = make_tenant("initech", owner=other)
    response = client.post(
        "/admin/scoping/project/add/", {"name": "x", "tenant": initech.pk, **_inline_management()}
    )
    assert response.status_code == 200
    assert not Project.objects.filter(name="x").exists()


def test_members_and_viewers_are_kept_out_of_the_admin(client, trio):
    trio.bob.is_staff = True  # even when someone flipped the flag
    trio.bob.save()
    response = login(client, trio.bob).get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_superuser_sees_everything(client, trio, rows):
    root = get_user_model().objects.create_superuser("root", "root@example.test", PASSWORD)
    body = login(client, root).get("/admin/scoping/project/").content.decode()
    assert "acme-roadmap" in body and "globex-plans" in body
    _, theirs, _ = rows
    assert client.get(f"/admin/scoping/project/{theirs.pk}/change/").status_code == 200
    client.post(
        f"/admin/scoping/project/{theirs.pk}/change/", {"name": "edited", **_inline_management()}
    )
    theirs.refresh_from_db()
    assert (theirs.name, theirs.tenant_id) == ("edited", trio.globex.pk)
    response = client.post(
        "/admin/scoping/project/add/",
        {"name": "made-by-root", "tenant": trio.globex.pk, **_inline_management()},
    )
    assert response.status_code == 302
    assert Project.objects.get(name="made-by-root").tenant == trio.globex


def test_tenant_admins_invite_instead_of_adding_accounts_in_the_admin(client, trio):
    dora = make_user("dora")
    login(client, trio.alice)  # an owner, not a superuser: adding would tell who exists
    assert client.get("/admin/tenancy/membership/add/").status_code == 403
    response = client.post("/admin/tenancy/membership/add/", {"user": "dora", "role": "member"})
    assert response.status_code == 403
    assert not Membership.objects.filter(user=dora).exists()


def test_superusers_add_users_by_name_without_listing_all_users(client, trio):
    dora = make_user("dora")
    login(client, get_user_model().objects.create_superuser("root", "root@x.test", PASSWORD))
    form = client.get("/admin/tenancy/membership/add/").content.decode()
    assert "charlie" not in form  # no user list
    added = {"tenant": trio.acme.pk, "user": "dora", "role": "member"}
    assert client.post("/admin/tenancy/membership/add/", added).status_code == 302
    assert Membership.objects.get(user=dora).tenant == trio.acme
    missing = {**added, "user": "nobody"}
    assert client.post("/admin/tenancy/membership/add/", missing).status_code == 200


def test_membership_admin_keeps_the_last_owner(client, trio):
    owner = Membership.objects.get(tenant=trio.acme, user=trio.alice)
    login(client, trio.alice)
    response = client.post(
        f"/admin/tenancy/membership/{owner.pk}/change/", {"user": "alice", "role": "member"}
    )
    assert response.status_code == 200
    assert (
        client.post(f"/admin/tenancy/membership/{owner.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert Membership.objects.get(pk=owner.pk).role == Role.OWNER


def test_tenant_admin_who_is_not_owner_cannot_make_or_touch_owners(client, trio):
    add_member(trio.acme, trio.bob, Role.ADMIN)
    owner = Membership.objects.get(tenant=trio.acme, user=trio.alice)
    login(client, trio.bob)
    assert client.get(f"/admin/tenancy/membership/{owner.pk}/change/").status_code in (200, 403)
    client.post(
        f"/admin/tenancy/membership/{owner.pk}/change/", {"user": "alice", "role": "viewer"}
    )
    assert Membership.objects.get(pk=owner.pk).role == Role.OWNER
    dora = make_user("dora")
    client.post("/admin/tenancy/membership/add/", {"user": "dora", "role": "owner"})
    assert not Membership.objects.filter(user=dora, role=Role.OWNER).exists()


def test_api_key_admin_shows_the_key_once_and_stores_only_its_hash(client, trio):
    login(client, trio.alice)
    response = client.post(
        "/admin/tenancy/apikey/add/", {"name": "ci", "scopes": ["read", "run"]}, follow=True
    )
    body = response.content.decode()
    key = ApiKey.objects.get(name="ci")
    assert key.tenant == trio.acme and key.scopes == ["read", "run"]
    marker = f"ap_{key.prefix}_"
    assert marker in body  # shown on the page after creation ...
    full = body[body.index(marker) :].split()[0].split("<")[0]
    assert key.secret_hash != full and full not in str(ApiKey.objects.filter(pk=key.pk).values())
    again = client.get(f"/admin/tenancy/apikey/{key.pk}/change/").content.decode()
    assert full not in again and key.secret_hash not in again  # ... and never again


def test_owner_elsewhere_cannot_make_owners_where_only_admin(client, trio):
    add_member(trio.acme, trio.bob, Role.ADMIN)
    from tests.factories import make_tenant

    make_tenant("bobco", owner=trio.bob)
    dora = make_user("dora")
    response = login(client, trio.bob).post(
        "/admin/tenancy/membership/add/",
        {"tenant": trio.acme.pk, "user": "dora", "role": "owner"},
    )
    assert response.status_code == 403  # tenant admins invite from the members page
    assert not Membership.objects.filter(user=dora).exists()
    bobs = Membership.objects.get(tenant=trio.acme, user=trio.bob)
    response = client.post(
        f"/admin/tenancy/membership/{bobs.pk}/change/",
        {"tenant": trio.acme.pk, "user": "bob", "role": "owner"},
    )
    assert response.status_code == 200
    assert "Only an owner can make owners." in response.content.decode()
    assert Membership.objects.get(pk=bobs.pk).role == Role.ADMIN


def _inline_management(prefix: str = "ticket_set") -> dict:
    return {
        f"{prefix}-TOTAL_FORMS": "0",
        f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }


def test_filters_of_a_multi_tenant_admin_list_only_their_tenants_and_users(client, trio, rows):
    from tests.factories import make_tenant

    add_member(trio.globex, trio.bob, Role.ADMIN)
    add_member(trio.acme, trio.bob, Role.ADMIN)
    make_tenant("initech-secret-co", owner=make_user("dora"))
    Project.objects.filter(tenant=trio.acme).update(owner=trio.alice)
    body = login(client, trio.bob).get("/admin/scoping/project/").content.decode()
    assert "Acme" in body and "Globex" in body
    assert "Initech" not in body and "dora" not in body
    body = client.get("/admin/tenancy/membership/").content.decode()
    assert "Initech" not in body and "dora" not in body


def test_user_choices_are_members_of_the_admins_tenants_only(client, trio, rows):
    make_user("stranger")
    form = login(client, trio.alice).get("/admin/scoping/project/add/").content.decode()
    assert ">alice<" in form and ">bob<" in form
    assert "stranger" not in form and "charlie" not in form


def test_inline_rows_take_the_parents_tenant_and_scoped_choices(client, trio, rows):
    ours, theirs, _ = rows
    login(client, trio.alice)
    data = {
        "name": "acme-roadmap",
        **_inline_management(),
        "ticket_set-TOTAL_FORMS": "1",
        "ticket_set-0-title": "inline ticket",
        "ticket_set-0-watchers": [theirs.pk],
    }
    response = client.post(f"/admin/scoping/project/{ours.pk}/change/", data)
    assert response.status_code == 200  # another tenant's project refused as a watcher
    data.pop("ticket_set-0-watchers")
    response = client.post(f"/admin/scoping/project/{ours.pk}/change/", data)
    assert response.status_code == 302
    assert Ticket.objects.get(title="inline ticket").tenant == trio.acme


def test_a_duplicate_membership_is_a_form_error_not_a_crash(client, trio):
    root = get_user_model().objects.create_superuser("root", "root@x.test", PASSWORD)
    response = login(client, root).post(
        "/admin/tenancy/membership/add/", {"tenant": trio.acme.pk, "user": "bob", "role": "viewer"}
    )
    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert Membership.objects.get(tenant=trio.acme, user=trio.bob).role == Role.MEMBER


def test_bulk_delete_keeps_the_last_owner_and_deletes_the_rest(client, trio):
    olga = make_user("olga")
    add_member(trio.acme, olga, Role.OWNER)
    memberships = Membership.objects.filter(tenant=trio.acme)
    login(client, trio.alice).post(
        "/admin/tenancy/membership/",
        {
            "action": "delete_selected",
            "_selected_action": list(memberships.values_list("pk", flat=True)),
            "post": "yes",
        },
    )
    left = Membership.objects.filter(tenant=trio.acme)
    assert left.filter(role=Role.OWNER).count() == 2  # owners kept together
    assert not left.filter(user=trio.bob).exists()  # the member went


def test_api_key_form_refuses_a_past_expiry_and_never_stores_the_key(client, trio):
    login(client, trio.alice)
    response = client.post(
        "/admin/tenancy/apikey/add/",
        {"name": "old", "scopes": ["read"], "expires_at_0": "2000-01-01", "expires_at_1": "00:00"},
    )
    assert response.status_code == 200 and "in the future" in response.content.decode()
    response = client.post("/admin/tenancy/apikey/add/", {"name": "k", "scopes": ["read"]})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    key = ApiKey.objects.get(name="k")
    body = response.content.decode()
    full = body[body.index(f"ap_{key.prefix}_") :].split('"')[0]
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT session_data FROM django_session")
        assert all(full not in row[0] for row in cursor.fetchall())


def test_membership_admin_refuses_accounts_that_must_not_join(client, trio):
    make_user("ghost", is_active=False)
    login(client, get_user_model().objects.create_superuser("root", "root@x.test", PASSWORD))
    for name in ("ghost", "AnonymousUser"):
        response = client.post(
            "/admin/tenancy/membership/add/",
            {"tenant": trio.acme.pk, "user": name, "role": "admin"},
        )
        assert response.status_code == 200  # the form again, with an error
    assert not Membership.objects.filter(user__username__in=["ghost", "AnonymousUser"]).exists()


# -- memberships through the services: a key follows its creator ------------------------------
@pytest.fixture
def dana_keys(trio):
    """dana, an admin of acme, with an admin-scope key and a key it made; bob's key."""
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    _, hers_full = services.api_key_create(
        tenant=trio.acme, name="hers", scopes=["admin"], created_by=dana
    )
    _, made_full = services.api_key_create(
        tenant=trio.acme, name="made", scopes=["admin"], made_by_key=find_usable_key(hers_full)
    )
    _, bobs = services.api_key_create(
        tenant=trio.acme, name="bobs", scopes=["read"], created_by=trio.bob
    )
    return dana, {"hers": hers_full, "made": made_full, "bobs": bobs}


def assert_revoked_in_one_entry(trio, keys: dict[str, str]) -> None:
    assert find_usable_key(keys["hers"]) is None and find_usable_key(keys["made"]) is None
    assert find_usable_key(keys["bobs"]) is not None
    (entry,) = AuditEntry.objects.filter(tenant=trio.acme, action=AuditAction.MEMBER_REMOVED)
    assert sorted(k["name"] for k in entry.details["revoked_api_keys"]) == ["hers", "made"]
    assert entry.actor_label == "alice"
    assert not AuditEntry.objects.filter(action=AuditAction.API_KEY_REVOKED).exists()


def test_deleting_a_membership_in_the_admin_revokes_the_keys_the_member_made(
    client, trio, dana_keys
):
    dana, keys = dana_keys
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    response = login(client, trio.alice).post(
        f"/admin/tenancy/membership/{membership.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert_revoked_in_one_entry(trio, keys)


def test_bulk_deleting_memberships_in_the_admin_revokes_their_keys(client, trio, dana_keys):
    dana, keys = dana_keys
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    login(client, trio.alice).post(
        "/admin/tenancy/membership/",
        {"action": "delete_selected", "_selected_action": [membership.pk], "post": "yes"},
    )
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert_revoked_in_one_entry(trio, keys)


def test_a_role_changed_in_the_admin_caps_the_members_keys_and_is_audited(client, trio, dana_keys):
    dana, keys = dana_keys
    assert find_usable_key(keys["hers"]).effective_role == Role.ADMIN
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    response = login(client, trio.alice).post(
        f"/admin/tenancy/membership/{membership.pk}/change/", {"role": "viewer"}
    )
    assert response.status_code == 302
    assert Membership.objects.get(pk=membership.pk).role == Role.VIEWER
    for name in ("hers", "made"):
        assert find_usable_key(keys[name]).effective_role == Role.VIEWER
    (entry,) = AuditEntry.objects.filter(tenant=trio.acme, action=AuditAction.MEMBER_CHANGED)
    assert entry.changes == {"role": ["admin", "viewer"]} and entry.actor_label == "alice"


def test_the_admin_adds_members_through_the_services(client, trio):
    dora = make_user("dora")
    login(client, get_user_model().objects.create_superuser("root", "root@x.test", PASSWORD))
    added = {"tenant": trio.acme.pk, "user": "dora", "role": "admin"}
    assert client.post("/admin/tenancy/membership/add/", added).status_code == 302
    dora.refresh_from_db()
    assert dora.is_staff  # the service's rule
    membership = Membership.objects.get(user=dora)
    (entry,) = AuditEntry.objects.filter(
        object_id=str(membership.pk), object_type="tenancy.membership"
    )
    assert entry.action == AuditAction.MEMBER_ADDED and entry.actor_label == "root"


def test_the_key_admin_shows_who_made_each_key_and_what_it_acts_as(client, trio, dana_keys):
    dana, _ = dana_keys
    services.api_key_create(tenant=trio.acme, name="ops", scopes=["read"])
    services.membership_set(tenant=trio.acme, user=dana, role=Role.MEMBER)
    body = login(client, trio.alice).get("/admin/tenancy/apikey/").content.decode()
    rows = {
        name: row
        for row in body.split("<tr")[1:]
        for name in ("hers", "made", "ops")
        if f">{name}</a>" in row
    }
    assert ">dana<" in rows["hers"] and ">member<" in rows["hers"]
    assert ">key hers (dana)<" in rows["made"] and ">member<" in rows["made"]
    assert ">operator<" in rows["ops"] and ">owner<" in rows["ops"]
    made = ApiKey.objects.get(name="made")
    page = client.get(f"/admin/tenancy/apikey/{made.pk}/change/").content.decode()
    assert "hers (" in page  # the key that made it
