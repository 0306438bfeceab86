"""Sign-in attempt limits on /login/ and /admin/login/ (tenancy/sign_in.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db import connections
from django.test import Client

from base import rate_counters
from tenancy.sign_in import _ip_key, _user_key
from tests.factories import PASSWORD, make_user

PAGES = ["/login/", "/admin/login/"]


@pytest.fixture(autouse=True)
def fresh_counters():
    """Counters live in Redis for the whole test session: start each test at zero."""
    names = ["alice", "nobody", "bob"]
    ips = ["127.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.3"]
    keys = [_user_key(n) for n in names] + [_ip_key(ip) for ip in ips]
    for key in keys:
        rate_counters.reset(key)
    yield
    for key in keys:
        rate_counters.reset(key)


def sign_in(page: str, username: str, password: str, ip: str = "127.0.0.1"):
    return Client(REMOTE_ADDR=ip).post(page, {"username": username, "password": password})


@pytest.mark.parametrize("page", PAGES)
def test_it_refuses_the_right_password_after_five_failures(db, page, settings):
    make_user("alice", is_staff=True, is_superuser=True)
    for _ in range(5):
        assert sign_in(page, "alice", "wrong").status_code == 200
    refused = sign_in(page, "alice", PASSWORD)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    body = refused.content.decode()
    assert "Too many failed sign-ins; try again in 15 minutes." in body
    assert "_auth_user_id" not in refused.client.session


@pytest.mark.parametrize("page", PAGES)
def test_an_unknown_account_gets_the_same_answers(db, page):
    make_user("alice", is_staff=True, is_superuser=True)
    answers = {}
    for name in ("alice", "nobody"):
        statuses = [sign_in(page, name, "wrong").status_code for _ in range(6)]
        last = sign_in(page, name, "wrong")
        answers[name] = (statuses, last.status_code, "Too many failed sign-ins" in last.text)
    assert answers["alice"] == answers["nobody"] == ([200] * 5 + [429], 429, True)


def test_the_ip_limit_holds_across_account_names(db, settings):
    settings.SIGN_IN_FAILURES_PER_IP = 3
    make_user("alice")
    for name in ("nobody", "bob", "nobody"):
        assert sign_in("/login/", name, "wrong", ip="10.0.0.1").status_code == 200
    assert sign_in("/login/", "alice", PASSWORD, ip="10.0.0.1").status_code == 429
    # Another address is not affected.
    assert sign_in("/login/", "alice", PASSWORD, ip="10.0.0.2").status_code == 302


def test_a_success_clears_the_account_names_count(db):
    make_user("alice")
    for _ in range(4):
        sign_in("/login/", "alice", "wrong")
    assert sign_in("/login/", "alice", PASSWORD).status_code == 302
    for _ in range(4):
        assert sign_in("/login/", "alice", "wrong").status_code == 200
    assert sign_in("/login/", "alice", PASSWORD).status_code == 302


def test_parallel_guesses_do_not_slip_past_the_limit(db, settings):
    settings.SIGN_IN_FAILURES_PER_USER = 5
    make_user("alice")

    def guess(i: int) -> int:
        try:  # the threads do not see the test's transaction: every guess fails
            return sign_in("/login/", "alice", f"wrong{i}").status_code
        finally:
            connections.close_all()  # the test database is dropped at the end

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(guess, range(20)))
    assert sorted(statuses) == [200] * 5 + [429] * 15
    assert sign_in("/login/", "alice", PASSWORD).status_code == 429


def test_signals_fire_with_the_request(db):
    make_user("alice")
    seen = []

    def failed(sender, credentials, request=None, **kwargs):
        throttled = kwargs.get("throttled", False)
        seen.append(("failed", credentials.get("username"), request is not None, throttled))

    def logged_in(sender, request, user, **kwargs):
        seen.append(("in", user.username, request is not None, False))

    user_login_failed.connect(failed)
    user_logged_in.connect(logged_in)
    try:
        sign_in("/login/", "alice", "wrong", ip="10.0.0.3")
        sign_in("/login/", "alice", PASSWORD, ip="10.0.0.3")
        for _ in range(5):
            sign_in("/login/", "alice", "wrong", ip="10.0.0.3")
        sign_in("/login/", "alice", PASSWORD, ip="10.0.0.3")
    finally:
        user_login_failed.disconnect(failed)
        user_logged_in.disconnect(logged_in)
    assert seen[0] == ("failed", "alice", True, False)
    assert seen[1] == ("in", "alice", True, False)
    assert seen[-1] == ("failed", "alice", True, True)
    assert len(seen) == 8


def test_missing_fields_are_form_errors_not_counted(db):
    make_user("alice")
    for _ in range(10):
        response = Client().post("/login/", {"username": "alice"})
        assert response.status_code == 200
    assert sign_in("/login/", "alice", PASSWORD).status_code == 302
