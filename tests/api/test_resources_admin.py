"""REST administration (admin scope): API keys and members."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from tenancy.models import ApiKey, Membership, Role
from tests.api.test_resources import Api, as_key, assert_error, key_for
from tests.factories import add_member, login, make_user


# -- API keys --------------------------------------------------------------------------------
def test_api_keys_show_the_secret_in_the_create_response_only(client, trio):
    admin = as_key(client, trio.acme, "admin")
    created = admin.post("/api-keys", {"name": "ci", "scopes": ["read", "run"]})
    assert created.status_code == 201, created.content
    assert created["Cache-Control"] == "no-store"
    body = created.json()
    full = body["key"]
    assert full.startswith(f"ap_{body['prefix']}_") and body["scopes"] == ["read", "run"]
    assert Api(client, full).get("/agents").status_code == 200  # it works

    listed = admin.get("/api-keys").json()["results"]
    assert {k["name"] for k in listed} == {"ci", "test"}
    assert all("key" not in k for k in listed)
    assert "key" not in admin.get(f"/api-keys/{body['id']}").json()
    assert sum(full in b for b in admin.bodies) == 1  # the create response only


def test_api_key_validation(client, trio):
    admin = as_key(client, trio.acme, "admin")
    assert (
        "scopes"
        in assert_error(admin.post("/api-keys", {"name": "x", "scopes": []}), 400)["details"]
    )
    unknown = admin.post("/api-keys", {"name": "x", "scopes": ["root"]})
    assert "scopes" in assert_error(unknown, 400)["details"]
    past = (timezone.now() - timedelta(days=1)).isoformat()
    expired = admin.post("/api-keys", {"name": "x", "scopes": ["read"], "expires_at": past})
    assert "expires_at" in assert_error(expired, 400)["details"]


def test_revoke_by_post_or_delete_and_the_key_stops_working(client, trio):
    admin = as_key(client, trio.acme, "admin")
    first, second = key_for(trio.acme, "read"), key_for(trio.acme, "read")
    first_id = ApiKey.objects.get(prefix=first.split("_")[1]).pk
    second_id = ApiKey.objects.get(prefix=second.split("_")[1]).pk

    revoked = admin.post(f"/api-keys/{first_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert revoked.json()["usable"] is False
    assert admin.delete(f"/api-keys/{second_id}").status_code == 204
    for full in (first, second):
        assert_error(Api(client, full).get("/agents"), 401)
    active = {k["id"] for k in admin.get("/api-keys", {"active": "true"}).json()["results"]}
    assert first_id not in active and second_id not in active
    inactive = {k["id"] for k in admin.get("/api-keys", {"active": "false"}).json()["results"]}
    assert inactive == {first_id, second_id}


def test_non_admin_keys_and_members_cannot_see_keys_or_members(client, trio):
    for scopes in (("read",), ("read", "write", "run")):
        api = as_key(client, trio.acme, *scopes)
        assert_error(api.get("/api-keys"), 403, "permission_denied")
        assert_error(api.post("/api-keys", {"name": "x", "scopes": ["admin"]}), 403)
        assert_error(api.get("/members"), 403)
    login(client, trio.bob)  # a member, not an admin
    assert_error(Api(client, tenant_header="acme").get("/api-keys"), 403)
    assert_error(Api(client, tenant_header="acme").get("/members"), 403)


def test_a_session_admin_creates_keys_recorded_as_theirs(client, trio):
    login(client, trio.alice)
    created = Api(client, tenant_header="acme").post(
        "/api-keys", {"name": "mine", "scopes": ["read"]}
    )
    assert created.status_code == 201 and created.json()["created_by"] == "alice"


# -- members ---------------------------------------------------------------------------------
def test_members_add_by_username_or_email_change_role_and_remove(client, trio):
    dana, erin = make_user("dana"), make_user("erin")
    admin = as_key(client, trio.acme, "admin")
    listed = admin.get("/members").json()["results"]
    assert {(m["user"]["username"], m["role"]) for m in listed} == {
        ("alice", "owner"),
        ("bob", "member"),
    }

    invited = admin.post("/members", {"username": "dana", "role": "viewer"})
    assert invited.status_code == 201, invited.content
    assert invited.json()["invitee"] == "dana" and invited.json()["status"] == "pending"
    assert invited["Cache-Control"] == "no-store"
    by_email = admin.post("/members", {"email": "ERIN@example.test"})
    assert by_email.status_code == 201 and by_email.json()["role"] == "member"
    assert_error(admin.post("/members", {"username": "dana", "email": "x@example.test"}), 400)
    assert not Membership.objects.filter(user__in=[dana, erin]).exists()  # not until accepted
    for user, body in ((dana, invited), (erin, by_email)):
        path = body.json()["accept_url"].removeprefix("http://testserver")
        login(client, user)
        assert client.post(path, {"action": "accept"}).status_code == 302
        client.logout()
    added = admin.get("/members", {"role": "viewer"})
    added = {"id": added.json()["results"][0]["id"]}

    membership_id = added["id"]
    promoted = admin.patch(f"/members/{membership_id}", {"role": "admin"})
    assert promoted.status_code == 200 and promoted.json()["role"] == "admin"
    dana.refresh_from_db()
    assert dana.is_staff  # the service's rule: admins get the (tenant-scoped) admin site
    assert [
        m["user"]["username"] for m in admin.get("/members", {"role": "admin"}).json()["results"]
    ] == ["dana"]

    assert admin.delete(f"/members/{membership_id}").status_code == 204
    assert not Membership.objects.filter(tenant=trio.acme, user=dana).exists()
    assert Membership.objects.filter(tenant=trio.acme, user=erin).exists()


def test_the_last_owner_cannot_be_demoted_or_removed(client, trio):
    login(client, trio.alice)
    owner = Api(client, tenant_header="acme")
    alice_id = Membership.objects.get(tenant=trio.acme, user=trio.alice).pk
    demoted = owner.patch(f"/members/{alice_id}", {"role": "admin"})
    assert "owner" in assert_error(demoted, 409, "conflict")["message"]
    assert "owner" in assert_error(owner.delete(f"/members/{alice_id}"), 409)["message"]
    bob_id = Membership.objects.get(tenant=trio.acme, user=trio.bob).pk
    assert owner.patch(f"/members/{bob_id}", {"role": "owner"}).json()["role"] == "owner"
    assert owner.patch(f"/members/{alice_id}", {"role": "admin"}).status_code == 200  # now fine
    assert Membership.objects.get(pk=alice_id).role == Role.ADMIN


def test_owner_keys_act_as_owners_and_admin_keys_cannot_touch_owners(client, trio):
    alice_id = Membership.objects.get(tenant=trio.acme, user=trio.alice).pk
    bob_id = Membership.objects.get(tenant=trio.acme, user=trio.bob).pk
    from_owner = Api(client, key_for(trio.acme, "admin", created_by=trio.alice))
    assert_error(from_owner.delete(f"/members/{alice_id}"), 409)  # the last owner stays

    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    from_admin = Api(client, key_for(trio.acme, "admin", created_by=dana))
    assert_error(from_admin.patch(f"/members/{bob_id}", {"role": "owner"}), 403)
    assert_error(from_admin.patch(f"/members/{alice_id}", {"role": "member"}), 403)
    assert_error(from_admin.delete(f"/members/{alice_id}"), 403)
    assert from_admin.patch(f"/members/{bob_id}", {"role": "viewer"}).status_code == 200


def test_other_tenants_members_and_keys_answer_404(client, trio):
    charlie_id = Membership.objects.get(tenant=trio.globex, user=trio.charlie).pk
    globex_key_id = ApiKey.objects.get(prefix=key_for(trio.globex, "read").split("_")[1]).pk
    admin = as_key(client, trio.acme, "admin")
    assert_error(admin.get(f"/members/{charlie_id}"), 404)
    assert_error(admin.patch(f"/members/{charlie_id}", {"role": "viewer"}), 404)
    assert_error(admin.put(f"/members/{charlie_id}", {"role": "viewer"}), 404)
    assert_error(admin.delete(f"/members/{charlie_id}"), 404)
    assert_error(admin.get(f"/api-keys/{globex_key_id}"), 404)
    assert_error(admin.post(f"/api-keys/{globex_key_id}/revoke"), 404)
    assert_error(admin.delete(f"/api-keys/{globex_key_id}"), 404)
    assert ApiKey.objects.get(pk=globex_key_id).revoked_at is None
    assert Membership.objects.get(pk=charlie_id).role == Role.OWNER


def test_inviting_answers_the_same_whether_or_not_the_account_exists(client, trio):
    make_user("ghost", is_active=False)
    admin = Api(client, key_for(trio.acme, "admin", created_by=trio.alice))
    answers = [admin.post("/members", {"username": name}) for name in ("zed", "ghost", "bob")]
    assert [a.status_code for a in answers] == [201, 201, 201]
    shape = [sorted(a.json()) for a in answers]
    assert shape[0] == shape[1] == shape[2]
    pending = admin.get("/invitations").json()["results"]
    assert sorted(i["invitee"] for i in pending) == ["bob", "ghost", "zed"]
    invitation_id = pending[0]["id"]
    assert admin.delete(f"/invitations/{invitation_id}").status_code == 204
    assert len(admin.get("/invitations").json()["results"]) == 2
    other = Api(client, key_for(trio.globex, "admin", created_by=trio.charlie))
    assert_error(other.delete(f"/invitations/{pending[1]['id']}"), 404)
    assert_error(other.get(f"/invitations/{pending[1]['id']}"), 404)


def test_accounts_that_must_not_join_cannot_be_invited_or_accept(client, trio):
    root = make_user("root", is_superuser=True)
    admin = Api(client, key_for(trio.acme, "admin", created_by=trio.alice))
    assert_error(admin.post("/members", {"username": "AnonymousUser", "role": "admin"}), 400)
    invited = admin.post("/members", {"email": "root@example.test", "role": "admin"})
    login(client, root)
    path = invited.json()["accept_url"].removeprefix("http://testserver")
    assert client.post(path, {"action": "accept"}).status_code == 403
    assert not Membership.objects.filter(user=root).exists()


def test_only_owner_authority_invites_owners(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    from_admin = Api(client, key_for(trio.acme, "admin", created_by=dana))
    assert_error(from_admin.post("/members", {"username": "zed", "role": "owner"}), 403)
    from_owner = Api(client, key_for(trio.acme, "admin", created_by=trio.alice))
    invited = from_owner.post("/members", {"username": "zed", "role": "owner"})
    assert invited.status_code == 201
    assert_error(from_admin.delete(f"/invitations/{invited.json()['id']}"), 403)


# -- a key follows its creator ----------------------------------------------------------------
IDP = {
    "slug": "acme-entra",
    "name": "Acme Entra ID",
    "issuer": "https://login.acme.example/v2.0",
    "client_id": "platform",
    "client_secret": "idp-secret",
}


def test_a_removed_admins_keys_and_the_keys_they_made_stop_in_one_audit_entry(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    hers = Api(client, key_for(trio.acme, "admin", name="hers", created_by=dana))
    made = hers.post("/api-keys", {"name": "made", "scopes": ["admin"]}).json()
    bobs = Api(client, key_for(trio.acme, "read", name="bobs", created_by=trio.bob))
    owner = Api(client, key_for(trio.acme, "admin", name="owner", created_by=trio.alice))
    dana_id = Membership.objects.get(tenant=trio.acme, user=dana).pk

    assert owner.delete(f"/members/{dana_id}").status_code == 204
    for gone in (hers, Api(client, made["key"])):
        assert_error(gone.get("/config"), 401)
        assert_error(gone.post("/api-keys", {"name": "x", "scopes": ["admin"]}), 401)
    assert bobs.get("/agents").status_code == 200
    listed = {k["name"]: k for k in owner.get("/api-keys").json()["results"]}
    assert listed["hers"]["revoked_at"] and listed["made"]["revoked_at"]
    assert listed["bobs"]["usable"] is True
    entries = owner.get("/audit-log", {"action": "member.removed"}).json()["results"]
    (entry,) = entries
    assert sorted(k["name"] for k in entry["details"]["revoked_api_keys"]) == ["hers", "made"]
    revoked = owner.get("/audit-log", {"action": "api_key.revoked"}).json()["results"]
    assert revoked == []  # the one entry says it all


def test_a_demoted_admins_key_is_refused_admin_work_on_its_next_request(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    hers = Api(client, key_for(trio.acme, "admin", name="hers", created_by=dana))
    made = Api(client, hers.post("/api-keys", {"name": "made", "scopes": ["admin"]}).json()["key"])
    for key in (hers, made):
        assert key.get("/config").status_code == 200
        assert key.get("/audit-log").status_code == 200
    assert hers.post("/identity-providers", IDP).status_code == 201

    login(client, trio.alice)  # the owner demotes her on the members API
    dana_id = Membership.objects.get(tenant=trio.acme, user=dana).pk
    Api(client, tenant_header="acme").patch(f"/members/{dana_id}", {"role": "viewer"})
    client.logout()
    for key in (hers, made):
        assert "admin role" in assert_error(key.get("/config"), 403)["message"]
        assert_error(key.get("/audit-log"), 403)
        assert_error(key.post("/identity-providers", {**IDP, "slug": "other"}), 403)
        assert_error(key.post("/api-keys", {"name": "more", "scopes": ["admin"]}), 403)
        assert_error(key.patch(f"/members/{dana_id}", {"role": "admin"}), 403)
        assert key.get("/agents").status_code == 200  # a viewer still reads
    assert ApiKey.objects.filter(tenant=trio.acme).count() == 2
    assert Membership.objects.get(pk=dana_id).role == Role.VIEWER


def test_a_key_made_with_a_key_lists_its_maker_and_the_person_behind_it(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    hers = Api(client, key_for(trio.acme, "admin", name="hers", created_by=dana))
    maker_id = ApiKey.objects.get(name="hers").pk
    created = hers.post("/api-keys", {"name": "made", "scopes": ["read"]})
    assert created.status_code == 201
    body = created.json()
    assert body["created_by"] == "dana"
    assert body["created_by_key"] == {
        "id": maker_id,
        "name": "hers",
        "prefix": ApiKey.objects.get(pk=maker_id).prefix,
    }
    assert body["made_by"] == "key hers (dana)" and body["effective_role"] == "admin"
    listed = {k["name"]: k for k in hers.get("/api-keys").json()["results"]}
    assert listed["made"]["created_by_key"]["id"] == maker_id
    assert listed["hers"]["created_by_key"] is None and listed["hers"]["made_by"] == "dana"
    fetched = hers.get(f"/api-keys/{body['id']}").json()
    assert fetched["made_by"] == "key hers (dana)"


def test_operator_keys_and_the_keys_they_make_keep_acting_as_owners(client, trio):
    operator = as_key(client, trio.acme, "admin")  # made with no creator: the operator's
    made = operator.post("/api-keys", {"name": "made", "scopes": ["admin"]}).json()
    assert (made["created_by"], made["made_by"]) == (None, "key test")
    assert made["role"] == made["effective_role"] == "owner"
    alice_id = Membership.objects.get(tenant=trio.acme, user=trio.alice).pk
    bob_id = Membership.objects.get(tenant=trio.acme, user=trio.bob).pk
    assert operator.delete(f"/members/{bob_id}").status_code == 204
    for key in (operator, Api(client, made["key"])):
        assert key.get("/config").status_code == 200
        assert key.get("/audit-log").status_code == 200
    assert_error(operator.delete(f"/members/{alice_id}"), 409)  # an owner's authority
    listed = {k["name"]: k for k in operator.get("/api-keys").json()["results"]}
    assert listed["test"]["made_by"] == "operator" and listed["test"]["usable"] is True
