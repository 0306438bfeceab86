"""A key's "may act for members" (ApiKey.acts_for_members) set through each face that makes
keys — the web keys page, the REST API, the Django admin — and what it does on /v1: a chat
whose `user` names a member not above the key's role is that member's run; without the
setting `user` is only recorded. The chats go through the real `openai` SDK to a live
server (tests/api/test_openai_chat_features.py covers the runs' memory and grants)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Run
from tenancy import services as tenancy
from tenancy.models import ApiKey, Role
from tests.api.conftest import sdk
from tests.api.test_openai_compat import run_of
from tests.api.test_resources import Api, assert_error
from tests.factories import add_member, login, make_user
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dana(trio):
    """An admin of acme (not its owner): alice outranks her keys, bob does not."""
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    return dana


def chat_as(asgi_server: str, provider_server, key: str, user: str) -> Run:
    """One /v1 chat with the assistant naming `user`; its run."""
    provider_server.script("openai", TextReply("Hi."))
    completion = sdk(asgi_server, key).chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "hi"}], user=user
    )
    return run_of(completion.id)


def assert_acts_for(run: Run, member) -> None:
    assert run.initiated_by_user == member and run.initiated_by_api_key is not None


def assert_only_recorded(run: Run, user: str) -> None:
    assert run.initiated_by_user is None and run.client_request["end_user"] == user


def secret_of(key: ApiKey, body: str) -> str:
    """The full key as a page shows it once: `ap_<prefix>_<secret>`."""
    marker = f"ap_{key.prefix}_"
    assert marker in body
    return marker + body.split(marker, 1)[1].split('"')[0].split("<")[0].split()[0]


# -- the web keys page ----------------------------------------------------------------------
def keys_url(view: str) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme"})


def test_an_admin_ticks_it_on_the_keys_page_and_the_key_acts_for_members(
    client, trio, dana, agent, asgi_server, provider_server
):
    login(client, dana)
    created = client.post(
        keys_url("api_key_create"),
        {"name": "Portal", "scopes": ["read", "run"], "acts_for_members": "on"},
    )
    assert created.status_code == 200, created.content
    key = ApiKey.objects.get(tenant=trio.acme, name="Portal")
    assert key.acts_for_members and key.role == Role.ADMIN and key.created_by == dana
    full = secret_of(key, created.content.decode())
    listing = client.get(keys_url("api_keys")).content.decode()
    assert full not in listing and key.secret_hash not in listing
    assert "<small>may act for members</small>" in listing

    assert_acts_for(chat_as(asgi_server, provider_server, full, "bob"), trio.bob)
    # alice owns acme: an admin's key never acts as someone who outranks it.
    assert_only_recorded(chat_as(asgi_server, provider_server, full, "alice"), "alice")


def test_a_key_left_unticked_only_records_the_user(
    client, trio, agent, asgi_server, provider_server
):
    login(client, trio.alice)
    created = client.post(keys_url("api_key_create"), {"name": "Plain", "scopes": ["run"]})
    key = ApiKey.objects.get(tenant=trio.acme, name="Plain")
    assert not key.acts_for_members
    full = secret_of(key, created.content.decode())
    assert_only_recorded(chat_as(asgi_server, provider_server, full, "bob"), "bob")


def test_the_keys_page_refuses_members_and_viewers(client, trio):
    viewer = make_user("vera")
    add_member(trio.acme, viewer, Role.VIEWER)
    for who in (trio.bob, viewer):
        login(client, who)
        response = client.post(
            keys_url("api_key_create"),
            {"name": "Mine", "scopes": ["run"], "acts_for_members": "on"},
        )
        assert response.status_code == 403
        assert client.get(keys_url("api_keys")).status_code == 403
    assert not ApiKey.objects.filter(tenant=trio.acme).exists()


# -- the REST API ---------------------------------------------------------------------------
def test_rest_sets_it_on_create_reads_it_back_and_never_shows_the_secret_again(
    client, trio, dana, agent, asgi_server, provider_server
):
    api = Api(login(client, dana), tenant_header="acme")
    created = api.post(
        "/api-keys", {"name": "portal", "scopes": ["read", "run"], "acts_for_members": True}
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["acts_for_members"] is True and body["role"] == "admin"
    full = body["key"]
    plain = api.post("/api-keys", {"name": "plain", "scopes": ["run"]}).json()
    assert plain["acts_for_members"] is False  # the default

    assert api.get(f"/api-keys/{body['id']}").json()["acts_for_members"] is True
    listed = {k["name"]: k["acts_for_members"] for k in api.get("/api-keys").json()["results"]}
    assert listed == {"portal": True, "plain": False}
    hashes = ApiKey.objects.filter(tenant=trio.acme).values_list("secret_hash", flat=True)
    assert sum(full in b for b in api.bodies) == 1  # its create response only
    assert not any(h in b for h in hashes for b in api.bodies)

    assert_acts_for(chat_as(asgi_server, provider_server, full, "bob"), trio.bob)
    assert_only_recorded(chat_as(asgi_server, provider_server, plain["key"], "bob"), "bob")


def test_rest_refuses_it_where_not_allowed_and_a_keys_powers_stay_fixed(client, trio):
    # The owner's admin key, without the setting: it makes no key freer than itself.
    owner_key = Api(client, tenancy.api_key_create(
        tenant=trio.acme, name="root", scopes=["admin"], created_by=trio.alice
    )[1])  # fmt: skip
    refused = owner_key.post(
        "/api-keys", {"name": "x", "scopes": ["run"], "acts_for_members": True}
    )
    details = assert_error(refused, 400, "invalid")["details"]
    assert "does not" in str(details["acts_for_members"])
    for bad in ("maybe", None, [True], {"on": 1}):
        wrong = owner_key.post(
            "/api-keys", {"name": "x", "scopes": ["run"], "acts_for_members": bad}
        )
        assert "acts_for_members" in assert_error(wrong, 400)["details"], bad
    _, acting = tenancy.api_key_create(
        tenant=trio.acme, name="acting", scopes=["admin"], acts_for_members=True
    )
    child = Api(client, acting).post(
        "/api-keys", {"name": "child", "scopes": ["run"], "acts_for_members": True}
    )
    assert child.status_code == 201 and child.json()["acts_for_members"] is True

    # Set at creation only: no update, the value stays.
    key_id = child.json()["id"]
    for change in (owner_key.patch, owner_key.put):
        answer = change(f"/api-keys/{key_id}", {"acts_for_members": False})
        assert_error(answer, 405)
    assert ApiKey.objects.get(pk=key_id).acts_for_members is True
    # Members do not manage keys at all.
    member = Api(login(client, trio.bob), tenant_header="acme")
    denied = member.post("/api-keys", {"name": "m", "scopes": ["run"], "acts_for_members": True})
    assert_error(denied, 403)
    assert set(ApiKey.objects.values_list("name", flat=True)) == {"root", "acting", "child"}


# -- the Django admin -----------------------------------------------------------------------
def test_the_admin_add_form_sets_it_and_the_change_form_keeps_it(
    client, trio, dana, agent, asgi_server, provider_server
):
    login(client, dana)
    form = client.get("/admin/tenancy/apikey/add/").content.decode()
    assert 'name="acts_for_members"' in form
    created = client.post(
        "/admin/tenancy/apikey/add/",
        {"name": "admin-made", "scopes": ["read", "run"], "acts_for_members": "on"},
    )
    assert created.status_code == 200, created.content
    key = ApiKey.objects.get(name="admin-made")
    assert key.tenant == trio.acme and key.acts_for_members and key.role == Role.ADMIN
    full = secret_of(key, created.content.decode())

    change_url = f"/admin/tenancy/apikey/{key.pk}/change/"
    change = client.get(change_url).content.decode()
    assert full not in change and key.secret_hash not in change
    assert 'name="acts_for_members"' not in change  # read-only once made
    saved = client.post(change_url, {"name": "renamed"})  # the box unticked, were it there
    assert saved.status_code == 302, saved.content
    key.refresh_from_db()
    assert key.name == "renamed" and key.acts_for_members

    assert_acts_for(chat_as(asgi_server, provider_server, full, "bob"), trio.bob)


def test_the_admin_keeps_members_out(client, trio):
    trio.bob.is_staff = True  # even when someone flipped the flag
    trio.bob.save()
    login(client, trio.bob)
    response = client.post(
        "/admin/tenancy/apikey/add/",
        {"name": "sneaky", "scopes": ["run"], "acts_for_members": "on"},
    )
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert not ApiKey.objects.exists()


def test_a_key_stops_acting_for_members_once_its_creator_is_no_admin(
    client, trio, dana, agent, asgi_server, provider_server
):
    """The server remembers the key verified; the role changed here (another process) moves
    the keys version, and its next request is checked again."""
    _, full = tenancy.api_key_create(
        tenant=trio.acme, name="portal", scopes=["read", "run"], created_by=dana,
        acts_for_members=True,
    )  # fmt: skip
    assert_acts_for(chat_as(asgi_server, provider_server, full, "bob"), trio.bob)
    tenancy.membership_set(tenant=trio.acme, user=dana, role=Role.MEMBER)
    assert_only_recorded(chat_as(asgi_server, provider_server, full, "bob"), "bob")
