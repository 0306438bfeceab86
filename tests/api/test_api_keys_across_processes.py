"""A key follows its creator in every process: a live server (another process) remembers
the keys it verified, and a role lowered, an account deactivated or a member removed here
— by the members API, the Django admin or a service — moves the keys version in Redis, so
the server checks the key again on its next request (no waiting, no retry). REST and /v1
through real clients; MCP in tests/mcp/test_server.py."""

from __future__ import annotations

import httpx2
import openai
import pytest

from tenancy import services as tenancy
from tenancy.models import Membership, Role
from tests.api.conftest import sdk
from tests.factories import add_member, login, make_user
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dana(trio):
    """An admin of acme (not its owner)."""
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    return dana


def get(asgi_server: str, key: str, path: str) -> httpx2.Response:
    return httpx2.get(
        f"{asgi_server}/api/v1{path}", headers={"Authorization": f"Bearer {key}"}, timeout=20
    )


def test_a_role_lowered_in_the_admin_limits_the_key_on_the_servers_next_request(
    client, trio, dana, asgi_server
):
    _, full = tenancy.api_key_create(
        tenant=trio.acme, name="hers", scopes=["admin"], created_by=dana
    )
    for _ in range(2):  # verified, then answered from the server's memory
        assert get(asgi_server, full, "/config").status_code == 200
        assert get(asgi_server, full, "/audit-log").status_code == 200
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    changed = login(client, trio.alice).post(
        f"/admin/tenancy/membership/{membership.pk}/change/", {"role": "viewer"}
    )
    assert changed.status_code == 302
    assert get(asgi_server, full, "/config").status_code == 403
    assert get(asgi_server, full, "/audit-log").status_code == 403
    assert get(asgi_server, full, "/agents").status_code == 200  # a viewer reads

    dana.is_active = False
    dana.save()
    assert get(asgi_server, full, "/agents").status_code == 401


def test_a_member_removed_here_is_refused_by_the_server_at_once(client, trio, dana, asgi_server):
    _, full = tenancy.api_key_create(
        tenant=trio.acme, name="hers", scopes=["read"], created_by=dana
    )
    assert get(asgi_server, full, "/agents").status_code == 200
    tenancy.membership_remove(membership=Membership.objects.get(tenant=trio.acme, user=dana))
    assert get(asgi_server, full, "/agents").status_code == 401


def test_v1_refuses_runs_to_a_key_whose_creator_became_a_viewer(
    trio, dana, agent, asgi_server, provider_server
):
    _, full = tenancy.api_key_create(
        tenant=trio.acme, name="chat", scopes=["read", "run"], created_by=dana
    )
    provider_server.script("openai", TextReply("Hi."))
    chat = {"model": "assistant", "messages": [{"role": "user", "content": "hi"}]}
    assert sdk(asgi_server, full).chat.completions.create(**chat).choices[0].message.content
    tenancy.membership_set(tenant=trio.acme, user=dana, role=Role.VIEWER)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk(asgi_server, full).chat.completions.create(**chat)
    assert "member role" in str(refused.value)
    assert "assistant" in [m.id for m in sdk(asgi_server, full).models.list()]  # it reads
