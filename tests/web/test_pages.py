from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.factories import PASSWORD, login, make_tenant


@pytest.mark.django_db
def test_login_page_renders_and_anonymous_users_are_sent_there(client):
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    response = client.get("/t/acme/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_logging_in_lands_on_the_only_tenant(client, trio):
    response = client.post("/login/", {"username": "bob", "password": PASSWORD}, follow=True)
    assert response.redirect_chain[-1][0] == "/t/acme/"
    assert b"Acme" in response.content and b"member" in response.content


def test_users_in_several_tenants_pick_one(client, trio):
    make_tenant("initech", owner=trio.alice)
    body = login(client, trio.alice).get("/").content.decode()
    assert "Choose a workspace" in body and "/t/acme/" in body and "/t/initech/" in body
    assert "/t/globex/" not in body


def test_user_without_tenant_is_told_what_to_do(client, db):
    from tests.factories import make_user

    body = login(client, make_user("newbie")).get("/").content.decode()
    assert "No workspace yet" in body


def test_logout_is_a_post(client, trio):
    login(client, trio.bob)
    assert client.post("/logout/").status_code == 302
    assert client.get("/t/acme/").status_code == 302


def _tenant_urls() -> list[str]:
    """Every URL pattern under /t/<tenant_slug>/, with dummy values for other arguments."""
    urls: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            route = str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + route)
            elif isinstance(entry, URLPattern) and "<slug:tenant_slug>" in prefix + route:
                url = (prefix + route).replace("<slug:tenant_slug>", "acme")
                for kind, dummy in (
                    ("int", "1"),
                    ("uuid", "00000000-0000-0000-0000-000000000001"),
                    ("slug", "x"),
                    ("str", "x"),
                    ("path", "x"),
                ):
                    while f"<{kind}:" in url:
                        start = url.index(f"<{kind}:")
                        url = url[:start] + dummy + url[url.index(">", start) + 1 :]
                urls.append("/" + url.lstrip("^").rstrip("$"))

    walk(get_resolver().url_patterns, "")
    return urls


def test_every_tenant_page_answers_404_to_outsiders(client, trio):
    urls = _tenant_urls()
    assert "/t/acme/" in urls
    login(client, trio.charlie)
    for url in urls:
        assert client.get(url).status_code == 404, url
        assert client.get(url.replace("/t/acme/", "/t/no-such-tenant/")).status_code == 404, url


def test_tenant_home_for_members(client, trio):
    assert login(client, trio.bob).get("/t/acme/").status_code == 200
    assert client.get("/t/globex/").status_code == 404


def test_guardian_object_permissions_are_wired(trio):
    from guardian.shortcuts import assign_perm

    assert not trio.bob.has_perm("tenancy.change_tenant", trio.acme)
    assign_perm("tenancy.change_tenant", trio.bob, trio.acme)
    assert trio.bob.has_perm("tenancy.change_tenant", trio.acme)
    assert not trio.bob.has_perm("tenancy.change_tenant", trio.globex)


@pytest.mark.django_db
def test_the_vector_extension_is_installed():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert cursor.fetchone() is not None
