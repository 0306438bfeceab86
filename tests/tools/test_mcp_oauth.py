"""OAuth for remote MCP servers, end to end on the real database against an OAuth-protected
MCP server built on the SDK's server auth (tests/fakes/oauth_mcp_server.py): connecting per
tenant and per person through the pages, the authorization-code flow with PKCE and dynamic
registration, calls with the right token, a run that pauses for a person's account and goes
on once they connect, refresh before expiry, revocation, and what must be refused."""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

import httpx2
import pytest
from django.test import Client

from agents.models import Run, RunEvent, WorkflowDefinition
from agents.runs import execute_run, run_resume, run_start, tool_run, workflow_start
from agents.services import conversation_save
from tests.factories import login, make_mcp_connection
from tests.fakes.oauth_mcp_server import FakeOAuthMcpServer
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tools.mcp_oauth import access_token, token_revoke
from tools.models import McpOAuthClient, McpOAuthToken, McpServerConnection

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def oauth_server():
    """One server for the module (a stop waits out uvicorn's 0.1 s ticks: about 0.25 s a
    test); `server` gives each test its fresh state."""
    with FakeOAuthMcpServer() as fake:
        yield fake


@pytest.fixture
def server(settings, oauth_server):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    oauth_server.reset()
    return oauth_server


@pytest.fixture
def tenant_wide(trio, server) -> McpServerConnection:
    return make_mcp_connection(trio.acme, server.url, "docs", auth_mode="oauth_tenant")


@pytest.fixture
def per_user(trio, server) -> McpServerConnection:
    return make_mcp_connection(trio.acme, server.url, "crm", auth_mode="oauth_user")


@functools.cache
def browser() -> httpx2.Client:
    """The person's browser: one client (a client made per request loads the CA bundle,
    about 20 ms, each time)."""
    return httpx2.Client()


def authorize(server: FakeOAuthMcpServer, location: str, subject: str) -> str:
    """The person at the authorization server: consent given as `subject`; the path and
    query it sends them back to."""
    assert location.startswith(f"{server.issuer}/authorize?"), location
    server.next_subject = subject
    answer = browser().get(location, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["location"])
    assert back.path == "/mcp-oauth/callback"
    return f"{back.path}?{back.query}"


def connect(client: Client, server, start_path: str, subject: str):
    started = client.post(start_path)
    assert started.status_code == 200, started.content
    return client.get(authorize(server, authorization_url(started), subject))


def authorization_url(page) -> str:
    """Where the page that begins a flow sends the person (its refresh and its link)."""
    import html
    import re

    found = re.search(r'id="mcp-oauth-continue" href="([^"]+)"', page.content.decode())
    assert found, page.content
    return html.unescape(found.group(1))


# -- per tenant ----------------------------------------------------------------------------
def test_an_admin_connects_the_tenants_account_and_every_call_uses_it(trio, server, tenant_wide):
    admin = login(Client(), trio.alice)
    done = connect(admin, server, f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")
    assert done.status_code == 302 and done["Location"] == "/t/acme/mcp-connections/"
    # Discovery, registration and PKCE as the spec has them.
    [asked] = server.authorize_requests
    assert asked.code_challenge and asked.resource == server.url
    client = McpOAuthClient.objects.get(connection=tenant_wide)
    assert (client.source, client.issuer) == ("registered", server.issuer)
    token = McpOAuthToken.objects.get(connection=tenant_wide)
    assert token.user_id is None and token.connected_by_id == trio.alice.pk
    assert token.expires_at is not None and token.refresh_token
    # The tool list was refreshed with the token.
    tenant_wide.refresh_from_db()
    assert tenant_wide.status == "ok", tenant_wide.last_error
    assert {t["name"] for t in tenant_wide.tools_cache} == {"whoami", "leak", "add"}
    # Anyone's call (a person's, an API key's) uses the tenant's account.
    for by in (trio.bob, None):
        result = tool_run(tenant=trio.acme, name="docs__whoami", arguments={}, user=by)
        assert (result.error, result.result) == (None, {"result": "acme-bot"})
    # Encrypted at rest: the column holds no plaintext token.
    from django.db import connection as db

    with db.cursor() as cursor:
        cursor.execute("SELECT access_token FROM tools_mcpoauthtoken WHERE id = %s", [token.pk])
        assert token.access_token not in cursor.fetchone()[0]
    page = admin.get("/t/acme/mcp-connections/").content.decode()
    assert "connected" in page and token.access_token not in page


def test_before_an_admin_connects_the_tool_list_says_so(trio, server, tenant_wide):
    from tools.mcp_connections import mcp_connection_refresh

    refreshed = mcp_connection_refresh(tenant_wide)
    assert refreshed.status == "unavailable"
    assert "no account connected yet: connect the tenant's" in refreshed.last_error


def test_a_member_cannot_connect_the_tenants_account(trio, server, tenant_wide):
    member = login(Client(), trio.bob)
    answer = member.post(f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/")
    assert answer.status_code == 403
    assert not McpOAuthToken.objects.exists()


# -- per person ----------------------------------------------------------------------------
def test_a_run_pauses_until_its_person_connects_then_uses_their_token_only(
    trio, server, per_user, agent, provider_server, django_capture_on_commit_callbacks
):
    # The admin connects their own account: the tool list is fetched with it.
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")
    per_user.refresh_from_db()
    assert per_user.status == "ok", per_user.last_error
    # Bob has not connected: his run pauses with a "connect your account" step.
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "crm__whoami", "{}")]),
        TextReply("You are bob-at-crm."),
    )
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    run = run_start(tenant=trio.acme, agent=agent, input="Who am I?", conversation=chat,
                    initiated_by=trio.bob, enqueue=False)  # fmt: skip
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "awaiting_approval", run.error
    step = RunEvent.objects.get(run=run, type="account.connect_required").payload
    assert step["connect_url"] == f"/t/acme/mcp-accounts/{per_user.pk}/connect/"
    assert step["connection"] == "crm" and "Connect your crm account" in step["message"]
    assert not server.provider.access or all(  # alice's token never went out for bob
        t.subject == "alice-at-crm" for t in server.provider.access.values()
    )
    # His chat shows the step with its link, like an approval card; he may stop the run.
    bob = login(Client(), trio.bob)
    page = bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    assert "Connect your account: <code>crm</code>" in page
    assert f'href="{step["connect_url"]}"' in page
    assert "Waiting for you to connect your account" in page
    timeline = admin.get(f"/t/acme/runs/{run.pk}/")  # the run's record shows the step
    assert timeline.status_code == 200 and "account.connect_required" in timeline.content.decode()
    # Bob connects his own account from the link: the run is queued again and goes on.
    assert "Connect your crm account" in bob.get(step["connect_url"]).content.decode()
    with django_capture_on_commit_callbacks(execute=True):  # (as the commit would)
        done = connect(bob, server, step["connect_url"], "bob-at-crm")
    assert done.status_code == 302 and done["Location"] == "/t/acme/mcp-accounts/"
    run.refresh_from_db()
    assert run.status == "queued"
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.output == "You are bob-at-crm."
    result = RunEvent.objects.get(run=run, type="tool.completed").payload
    assert result["result"] == {"result": "bob-at-crm"}
    # Each person's calls use their own token.
    mine = tool_run(tenant=trio.acme, name="crm__whoami", arguments={}, user=trio.alice)
    assert mine.result == {"result": "alice-at-crm"}
    assert McpOAuthToken.objects.filter(connection=per_user).count() == 2


def test_a_run_without_a_person_gets_a_clear_error(trio, server, per_user):
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")
    result = tool_run(tenant=trio.acme, name="crm__whoami", arguments={})
    assert result.result is None
    assert "each person's own account, and this run has no person" in result.error
    # A direct call cannot wait: a person not connected is told to connect, as an error.
    direct = tool_run(tenant=trio.acme, name="crm__whoami", arguments={}, user=trio.bob)
    assert direct.status == "failed" and "Connect your crm account" in direct.error


def test_a_workflow_step_needing_a_persons_account_fails_saying_to_connect_it(
    trio, server, per_user
):
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")
    flow = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="who", name="Who",
        definition={"steps": [{"id": "me", "tool": "crm__whoami", "arguments": {}}]},
    )  # fmt: skip
    run = workflow_start(tenant=trio.acme, workflow=flow, input={}, initiated_by=trio.bob,
                         enqueue=False)  # fmt: skip

    assert execute_run(run.pk) == "failed"  # a declared workflow does not wait for bob

    run.refresh_from_db()
    link = f"/t/acme/mcp-accounts/{per_user.pk}/connect/"
    assert "needs your crm account connected first" in run.error and link in run.error
    assert "cannot wait for a person" in run.error and "approval" not in run.error
    # Bob connects at the link and resumes the run: the step runs again, with his token.
    connect(login(Client(), trio.bob), server, link, "bob-at-crm")
    run_resume(tenant=trio.acme, run=run, by=trio.bob)
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.structured_output == {"result": "bob-at-crm"}


def test_the_accounts_page_lists_connects_and_disconnects(trio, server, per_user):
    bob = login(Client(), trio.bob)
    page = bob.get("/t/acme/mcp-accounts/").content.decode()
    assert "crm" in page and "Not connected" in page
    connect(bob, server, f"/t/acme/mcp-accounts/{per_user.pk}/connect/", "bob-at-crm")
    token = McpOAuthToken.objects.get(connection=per_user, user=trio.bob)
    assert "Connected" in bob.get("/t/acme/mcp-accounts/").content.decode()
    assert bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/disconnect/").status_code == 302
    assert not McpOAuthToken.objects.filter(pk=token.pk).exists()
    assert set(server.revoked) == {token.access_token, token.refresh_token}  # RFC 7009


# -- refresh and revocation ------------------------------------------------------------------
def test_an_expiring_token_is_refreshed_once_before_use(trio, server, tenant_wide):
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")
    token = McpOAuthToken.objects.get(connection=tenant_wide)
    old = token.access_token
    server.expire_all()  # the server no longer takes it; ours says it expires in 10 s
    McpOAuthToken.objects.filter(pk=token.pk).update(
        expires_at=token.created_at.__class__.now(token.created_at.tzinfo)
    )
    result = tool_run(tenant=trio.acme, name="docs__whoami", arguments={})
    assert result.result == {"result": "acme-bot"}, result.error
    token.refresh_from_db()
    assert token.access_token != old and token.refreshed_at is not None
    assert server.refreshes == 1
    # Fresh now: the next call refreshes nothing.
    assert access_token(connection=tenant_wide, user_id=None) == token.access_token
    assert server.refreshes == 1


def test_a_revoked_account_is_asked_for_again(trio, server, tenant_wide, per_user):
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")
    assert admin.post(f"/t/acme/mcp-connections/{tenant_wide.pk}/disconnect/").status_code == 302
    assert not McpOAuthToken.objects.filter(connection=tenant_wide).exists()
    result = tool_run(tenant=trio.acme, name="docs__whoami", arguments={}, user=trio.bob)
    assert "needs the tenant's account connected: an admin connects it" in result.error
    # A refresh token the server no longer honours: the token is dropped, the person asked.
    connect(admin, server, f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")
    mine = McpOAuthToken.objects.get(connection=per_user, user=trio.alice)
    server.provider.refresh.clear()
    McpOAuthToken.objects.filter(pk=mine.pk).update(expires_at=mine.created_at)
    assert token_revoke(connection=per_user, user_id=trio.bob.pk) is False
    from tools.mcp_oauth import NotConnected

    with pytest.raises(NotConnected):
        access_token(connection=per_user, user_id=trio.alice.pk)
    assert not McpOAuthToken.objects.filter(pk=mine.pk).exists()


# -- tenants and people apart ----------------------------------------------------------------
def test_another_tenants_connection_and_another_persons_token_are_out_of_reach(
    trio, server, per_user, tenant_wide
):
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")
    outsider = login(Client(), trio.charlie)  # globex's owner
    for path in (
        f"/t/globex/mcp-accounts/{per_user.pk}/connect/",
        f"/t/globex/mcp-connections/{tenant_wide.pk}/connect/",
    ):
        assert outsider.post(path).status_code == 404
    assert outsider.get(f"/t/acme/mcp-accounts/{per_user.pk}/connect/").status_code == 404
    # Bob disconnecting revokes nothing of alice's.
    bob = login(Client(), trio.bob)
    assert bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/disconnect/").status_code == 302
    assert McpOAuthToken.objects.filter(connection=per_user, user=trio.alice).exists()
    # A per-tenant connection has no personal accounts page entry, and vice versa.
    assert bob.get(f"/t/acme/mcp-accounts/{tenant_wide.pk}/connect/").status_code == 404
    assert admin.post(f"/t/acme/mcp-connections/{per_user.pk}/disconnect/").status_code == 404


def test_a_callback_state_is_single_use_and_bound_to_its_person(trio, server, per_user):
    bob = login(Client(), trio.bob)
    started = bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/connect/")
    back = authorize(server, authorization_url(started), "bob-at-crm")
    # Another person's session cannot complete bob's flow (their session has no such state).
    alice = login(Client(), trio.alice)
    stolen = alice.get(back)
    assert stolen.status_code == 400 and b"unknown or expired" in stolen.content
    assert bob.get(back).status_code == 302
    replay = bob.get(back)
    assert replay.status_code == 400 and b"unknown or expired" in replay.content
    assert McpOAuthToken.objects.filter(connection=per_user).count() == 1
    started = bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/connect/")
    mixed = (
        authorize(server, authorization_url(started), "bob-at-crm") + "&iss=https://evil.example"
    )
    refused = bob.get(mixed)
    assert refused.status_code == 400 and b"another authorization server" in refused.content
    denied = bob.get("/mcp-oauth/callback?state=x&error=access_denied")
    assert denied.status_code == 400
    assert login(Client(), trio.bob).get("/mcp-oauth/callback").status_code == 400


def test_the_client_metadata_document_names_the_callback(client):
    document = client.get("/mcp-oauth/client.json").json()
    assert document["client_id"] == "http://testserver/mcp-oauth/client.json"
    assert document["redirect_uris"] == ["http://testserver/mcp-oauth/callback"]
    assert document["token_endpoint_auth_method"] == "none"


def test_the_metadata_document_is_the_client_where_the_server_accepts_one():
    from tools.mcp_oauth import client_source
    from tools.mcp_oauth.protocol import AuthServer

    def server(supported: bool) -> AuthServer:
        return AuthServer("https://s/mcp", "https://s", "https://s/a", "https://s/t", "", "",
                          (), supported, ())  # fmt: skip

    https = "https://platform.example/mcp-oauth/client.json"
    assert client_source(server(True), configured_id="", metadata_url=https) == "metadata_document"
    assert client_source(server(False), configured_id="", metadata_url=https) == "registered"
    assert client_source(server(True), configured_id="", metadata_url="http://x/c") == "registered"
    assert client_source(server(True), configured_id="mine", metadata_url=https) == "configured"


# -- hostile servers -------------------------------------------------------------------------
PRM = "/.well-known/oauth-protected-resource/mcp"
ASM = "/.well-known/oauth-authorization-server"


def hostile(routes: dict[str, object]) -> str:
    """What discovery says of a server answering `routes` (path -> JSON or Reply)."""
    from asgiref.sync import async_to_sync

    from tests.tools.local_server import LocalServer, Reply
    from tools.mcp_oauth.protocol import OAuthHttp, OAuthProblem, discover
    from tools.runtime.egress import EgressPolicy

    with LocalServer() as local:
        local.route("POST", "/mcp", Reply(status=401, json={}))
        for path, answer in routes.items():
            reply = answer if isinstance(answer, Reply) else Reply(json=answer)
            if callable(answer) and not isinstance(answer, Reply):
                reply = Reply(json=answer(local.url))
            local.route("GET", path, reply)
        http = OAuthHttp(EgressPolicy(allowlist=("127.0.0.1/32",)), http_allowed=True)
        try:
            async_to_sync(discover)(http, f"{local.url}/mcp")
        except OAuthProblem as exc:
            return str(exc)
    return "accepted"


def _prm(base: str) -> dict:
    return {"resource": f"{base}/mcp", "authorization_servers": [base]}


def _asm(base: str, **changes) -> dict:
    return {"issuer": base, "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token", "code_challenge_methods_supported": ["S256"],
            **changes}  # fmt: skip


def test_discovery_accepts_a_well_formed_server():
    assert hostile({PRM: _prm, ASM: _asm}) == "accepted"


def test_metadata_naming_another_issuer_is_refused():
    said = hostile({PRM: _prm, ASM: lambda base: _asm(base, issuer="https://evil.example")})
    assert "names another issuer (https://evil.example" in said


def test_an_endpoint_on_a_private_address_is_refused_before_any_request():
    prm = lambda base: {"resource": f"{base}/mcp", "authorization_servers": ["http://10.0.0.7"]}  # noqa: E731
    said = hostile({PRM: prm})
    assert "could not be reached" in said and "10.0.0.7 is not allowed" in said


def test_a_huge_metadata_document_is_refused():
    from tests.tools.local_server import Reply

    huge = Reply(body=b'{"resource": "' + b"x" * 200_000 + b'"}',
                 headers={"content-type": "application/json"})  # fmt: skip
    said = hostile({PRM: huge})
    assert "protected-resource metadata" in said and "could not be reached" in said


def test_metadata_for_another_resource_or_without_pkce_is_refused():
    other = lambda base: {"resource": "https://elsewhere.example/mcp",  # noqa: E731
                          "authorization_servers": [base]}  # fmt: skip
    assert "names another resource" in hostile({PRM: other, ASM: _asm})
    no_pkce = lambda base: _asm(base, code_challenge_methods_supported=["plain"])  # noqa: E731
    assert "does not support PKCE with S256" in hostile({PRM: _prm, ASM: no_pkce})
    assert "publishes no OAuth protected-resource metadata" in hostile({})


def test_https_is_required_of_a_server_given_as_https():
    from tools.mcp_oauth.protocol import OAuthHttp, OAuthProblem
    from tools.runtime.egress import EgressPolicy

    http = OAuthHttp(EgressPolicy(), http_allowed=False)
    with pytest.raises(OAuthProblem, match="is not https"):
        http.check_url("http://auth.example/token", "token endpoint")
    with pytest.raises(OAuthProblem, match="not an http"):
        http.check_url("javascript:alert(1)", "authorization endpoint")


# -- REST and the configuration document -----------------------------------------------------
def test_rest_knows_the_mode_and_the_tenants_account_never_its_token(trio, server, tenant_wide):
    from rest_framework.test import APIClient

    api = login(APIClient(), trio.alice, tenant=trio.acme)
    base = "/api/v1/mcp-connections"
    assert api.get(f"{base}/{tenant_wide.pk}/account").json()["connected"] is False
    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")  # fmt: skip
    token = McpOAuthToken.objects.get(connection=tenant_wide)
    shown = api.get(f"{base}/{tenant_wide.pk}").content.decode()
    shown += api.get(f"{base}/{tenant_wide.pk}/account").content.decode()
    assert '"auth_mode":"oauth_tenant"' in shown.replace(" ", "")
    assert '"connected":true' in shown.replace(" ", "")
    assert token.access_token not in shown and token.refresh_token not in shown
    member = login(APIClient(), trio.bob, tenant=trio.acme)
    assert member.delete(f"{base}/{tenant_wide.pk}/account").status_code == 403
    assert api.delete(f"{base}/{tenant_wide.pk}/account").status_code == 204
    assert not McpOAuthToken.objects.exists()
    # A header and OAuth at once is refused, clearly; an unknown mode too.
    both = api.post(base, {"name": "x", "url": server.url, "auth_mode": "oauth_user",
                           "auth_header": "t"}, format="json")  # fmt: skip
    assert both.status_code == 400 and "auth_header" in both.json()["error"]["details"]
    odd = api.post(base, {"name": "y", "url": server.url, "auth_mode": "magic"}, format="json")
    assert odd.status_code == 400 and "auth_mode" in odd.json()["error"]["details"]
    header = make_mcp_connection(trio.acme, server.url, "plain", auth_header="t")
    assert api.get(f"{base}/{header.pk}/account").status_code == 404
    outsider = login(APIClient(), trio.charlie, tenant=trio.globex)
    assert outsider.get(f"{base}/{tenant_wide.pk}/account").status_code == 404


def test_the_configuration_document_carries_the_mode(trio, server, per_user):
    from agents.config_document import config_export

    [entry] = config_export(tenant=trio.acme)["mcp_servers"]
    assert (entry["auth_mode"], entry["secret"]) == ("oauth_user", None)


def test_a_token_the_server_refuses_early_is_renewed_and_the_call_made_again(
    trio, server, tenant_wide
):
    admin = login(Client(), trio.alice)
    connect(admin, server, f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")
    server.expire_all()  # ours still says an hour: the server's 401 tells
    result = tool_run(tenant=trio.acme, name="docs__whoami", arguments={})
    assert result.result == {"result": "acme-bot"}, result.error
    assert server.refreshes == 1


def test_an_account_revoked_at_the_server_is_asked_for_again(trio, server, per_user):
    bob = login(Client(), trio.bob)
    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")  # fmt: skip
    connect(bob, server, f"/t/acme/mcp-accounts/{per_user.pk}/connect/", "bob-at-crm")
    revoked = [t for t, a in server.provider.access.items() if a.subject == "bob-at-crm"]
    for token in revoked:  # bob revokes the platform's access on the server's own page
        server.provider.access.pop(token)
    server.provider.refresh = {
        k: v for k, v in server.provider.refresh.items() if v.subject != "bob-at-crm"
    }
    result = tool_run(tenant=trio.acme, name="crm__whoami", arguments={}, user=trio.bob)
    assert "Connect your crm account" in result.error
    assert not McpOAuthToken.objects.filter(connection=per_user, user=trio.bob).exists()
    mine = tool_run(tenant=trio.acme, name="crm__whoami", arguments={}, user=trio.alice)
    assert mine.result == {"result": "alice-at-crm"}  # alice's account is untouched


@pytest.mark.django_db(transaction=True)
def test_two_processes_needing_an_expiring_token_refresh_it_once(trio, server, tenant_wide):
    """The refresh token rotates at each use (the fake spends it), so a second refresh with
    the same one would lose the account: the row lock makes the second wait and read the
    first's result. Two threads, two database connections, started together."""
    import threading

    from django.db import connections
    from django.utils import timezone

    from tenancy import rls

    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")  # fmt: skip
    McpOAuthToken.objects.filter(connection=tenant_wide).update(expires_at=timezone.now())
    start = threading.Barrier(2)
    got: list[str] = []

    def need_token() -> None:
        try:
            with rls.tenant_scope(trio.acme.pk):
                start.wait(timeout=10)
                got.append(access_token(connection=tenant_wide, user_id=None))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=need_token) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    token = McpOAuthToken.objects.get(connection=tenant_wide)
    assert got == [token.access_token] * 2
    assert server.refreshes == 1


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own
def test_the_chat_stream_shows_the_connect_step(trio, agent, monkeypatch):
    import asyncio

    from agentplatform.web.chat import stream

    # No approval row comes for a run parked on a connect: the stream's wait for a late
    # one is skipped (were it not, this one's 30 s would outlast the read's 10).
    monkeypatch.setattr(stream, "APPROVAL_WAIT_S", 30)
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    run = run_start(tenant=trio.acme, agent=agent, input="hi", conversation=chat,
                    initiated_by=trio.bob, enqueue=False)  # fmt: skip
    step = {"connection": "crm", "connection_id": 1, "connect_url": "/t/acme/mcp-accounts/1/"
            "connect/", "message": "Connect your crm account to go on.", "call_id": "c1",
            "name": "crm__whoami"}  # fmt: skip
    events = [("account.connect_required", step), ("approval.required", {"via_child": True})]
    for seq, (kind, payload) in enumerate(events, 1):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=kind, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    response = login(Client(), trio.bob).get(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/stream/")

    async def read() -> str:  # until the parked run's state is said (the stream stays open)
        body = ""
        async with asyncio.timeout(10):
            async for chunk in response.streaming_content:
                body += chunk.decode()
                if "Waiting for you" in body:
                    break
        return body

    body = asyncio.run(read())
    assert "Connect your account" in body and "Connect crm" in body
    assert "/t/acme/mcp-accounts/1/connect/" in body
    assert "Waiting for you to connect your account" in body


def test_a_person_may_stop_a_run_waiting_for_their_account(
    trio, server, per_user, agent, provider_server, django_capture_on_commit_callbacks
):
    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")  # fmt: skip
    provider_server.script("openai", ToolCallReply([ToolCall("c1", "crm__whoami", "{}")]))
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    run = run_start(tenant=trio.acme, agent=agent, input="Who am I?", conversation=chat,
                    initiated_by=trio.bob, enqueue=False)  # fmt: skip
    execute_run(run.pk)
    bob = login(Client(), trio.bob)
    assert "Your accounts" in bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/cancel/")
    run.refresh_from_db()
    assert run.status == "cancelled"
    with django_capture_on_commit_callbacks(execute=True):  # connecting later wakes nothing
        connect(bob, server, f"/t/acme/mcp-accounts/{per_user.pk}/connect/", "bob-at-crm")
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_connecting_and_disconnecting_are_audited_without_tokens(trio, server, per_user):
    from tenancy.models import AuditEntry

    bob = login(Client(), trio.bob)
    connect(bob, server, f"/t/acme/mcp-accounts/{per_user.pk}/connect/", "bob-at-crm")
    token = McpOAuthToken.objects.get(connection=per_user, user=trio.bob)
    bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/disconnect/")
    entries = list(AuditEntry.objects.filter(action__startswith="mcp_account.").order_by("id"))
    assert [(e.action, e.user_id, e.details["account"]) for e in entries] == [
        ("mcp_account.connected", trio.bob.pk, trio.bob.pk),
        ("mcp_account.disconnected", trio.bob.pk, trio.bob.pk),
    ]
    assert token.access_token not in str([e.details for e in entries])


def test_rest_lists_and_disconnects_a_persons_own_accounts_only(trio, server, per_user):
    from rest_framework.test import APIClient

    from tenancy.services import api_key_create

    connect(login(Client(), trio.bob), server,
            f"/t/acme/mcp-accounts/{per_user.pk}/connect/", "bob-at-crm")  # fmt: skip
    bob = login(APIClient(), trio.bob, tenant=trio.acme)
    alice = login(APIClient(), trio.alice, tenant=trio.acme)
    [mine] = bob.get("/api/v1/mcp-accounts").json()
    assert (mine["connection"], mine["connected"]) == ("crm", True)
    [hers] = alice.get("/api/v1/mcp-accounts").json()
    assert hers["connected"] is False and hers["connect_url"].endswith("/connect/")
    assert alice.delete(f"/api/v1/mcp-accounts/{per_user.pk}").status_code == 204
    assert McpOAuthToken.objects.filter(user=trio.bob).exists()  # hers, not his
    _, secret = api_key_create(tenant=trio.acme, name="ci", scopes=["run"])
    key = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert key.get("/api/v1/mcp-accounts").json() == []  # a key has no account of its own
    assert key.delete(f"/api/v1/mcp-accounts/{per_user.pk}").status_code == 403
    assert bob.delete(f"/api/v1/mcp-accounts/{per_user.pk}").status_code == 204
    assert not McpOAuthToken.objects.filter(user=trio.bob).exists()
    assert bob.delete("/api/v1/mcp-accounts/999999").status_code == 404
    assert bob.delete("/api/v1/mcp-accounts/x").status_code == 404


def test_a_server_echoing_the_token_never_shows_it(trio, server, tenant_wide):
    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")  # fmt: skip
    token = McpOAuthToken.objects.get(connection=tenant_wide).access_token
    result = tool_run(tenant=trio.acme, name="docs__leak", arguments={})
    assert result.result == {"result": "your token is [redacted]"}
    stored = list(RunEvent.objects.filter(run_id=result.run_id).values_list("payload", flat=True))
    assert stored and token not in str(stored)


# -- what no longer holds is forgotten ------------------------------------------------------
def _connect_both(trio, server, per_user) -> list[McpOAuthToken]:
    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")  # fmt: skip
    connect(login(Client(), trio.bob), server,
            f"/t/acme/mcp-accounts/{per_user.pk}/connect/", "bob-at-crm")  # fmt: skip
    return list(McpOAuthToken.objects.filter(connection=per_user))


def test_a_new_url_forgets_every_token_and_the_client_revoked_and_audited(
    trio, server, per_user, django_capture_on_commit_callbacks
):
    from tenancy.models import AuditEntry
    from tools.mcp_connections import mcp_connection_save

    tokens = _connect_both(trio, server, per_user)
    assert len(tokens) == 2 and McpOAuthClient.objects.filter(connection=per_user).exists()
    with django_capture_on_commit_callbacks(execute=True):
        mcp_connection_save(tenant=trio.acme, connection=per_user,
                            changes={"url": f"{server.issuer}/elsewhere/mcp"})  # fmt: skip
    assert not McpOAuthToken.objects.filter(connection=per_user).exists()
    assert not McpOAuthClient.objects.filter(connection=per_user).exists()
    # Revoked where they were issued (RFC 7009), after the change was committed.
    for token in tokens:
        assert {token.access_token, token.refresh_token} <= set(server.revoked)
    forgotten = AuditEntry.objects.filter(action="mcp_account.disconnected")
    assert sorted(str(e.details["account"]) for e in forgotten) == sorted(
        [str(trio.alice.pk), str(trio.bob.pk), "client registration"]
    )
    assert all(e.details["reason"] == "the connection's url changed" for e in forgotten)
    assert not any(t.access_token in str(e.details) for e in forgotten for t in tokens)
    # Nothing of before reaches the new URL: a person must connect again.
    from tools.mcp_oauth import NotConnected

    with pytest.raises(NotConnected):
        access_token(connection=per_user, user_id=trio.alice.pk)


def test_rest_and_the_admin_forget_tokens_on_a_new_client_id_or_mode(
    trio, server, per_user, django_capture_on_commit_callbacks
):
    from rest_framework.test import APIClient

    _connect_both(trio, server, per_user)
    api = login(APIClient(), trio.alice, tenant=trio.acme)
    with django_capture_on_commit_callbacks(execute=True):
        changed = api.patch(f"/api/v1/mcp-connections/{per_user.pk}",
                            {"oauth_client_id": "mine"}, format="json")  # fmt: skip
    assert changed.status_code == 200, changed.content
    assert not McpOAuthToken.objects.filter(connection=per_user).exists()
    assert not McpOAuthClient.objects.filter(connection=per_user).exists()
    # The admin: a new mode forgets the tenant's token connected under the old one.
    McpServerConnection.objects.filter(pk=per_user.pk).update(oauth_client_id="")
    _connect_both(trio, server, per_user)
    admin = login(Client(), trio.alice)
    form = {"name": "crm", "url": server.url, "auth_header": "", "auth_mode": "oauth_tenant",
            "oauth_scope": "", "oauth_client_id": "", "enabled": "on", "tool_prefix": "crm",
            "allowed_tool_names": "[]", "context_resource_uri": "", "tool_examples": "{}",
            "timeout_s": "5"}  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        saved = admin.post(f"/admin/tools/mcpserverconnection/{per_user.pk}/change/", form)
    assert saved.status_code == 302, saved.content.decode()[:3000]
    per_user.refresh_from_db()
    assert per_user.auth_mode == "oauth_tenant"
    assert not McpOAuthToken.objects.filter(connection=per_user).exists()


def test_a_token_of_another_issuer_or_server_is_never_sent(trio, server, tenant_wide):
    from tools.mcp_oauth import NotConnected

    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")  # fmt: skip
    McpOAuthToken.objects.filter(connection=tenant_wide).update(issuer="https://evil.example")
    with pytest.raises(NotConnected):
        access_token(connection=tenant_wide, user_id=None)
    assert not McpOAuthToken.objects.filter(connection=tenant_wide).exists()
    # A URL changed beneath the services (a raw update): the client's resource no longer
    # is the connection's server, so its token is not sent there.
    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{tenant_wide.pk}/connect/", "acme-bot")  # fmt: skip
    McpServerConnection.objects.filter(pk=tenant_wide.pk).update(url="http://127.0.0.2/mcp")
    tenant_wide.refresh_from_db()
    with pytest.raises(NotConnected):
        access_token(connection=tenant_wide, user_id=None)


def test_a_member_who_leaves_takes_their_accounts_with_them(
    trio, server, per_user, django_capture_on_commit_callbacks
):
    from tenancy.models import Membership
    from tenancy.services import membership_remove

    _connect_both(trio, server, per_user)
    bobs = McpOAuthToken.objects.get(connection=per_user, user=trio.bob)
    with django_capture_on_commit_callbacks(execute=True):
        membership_remove(membership=Membership.objects.get(tenant=trio.acme, user=trio.bob))
    assert not McpOAuthToken.objects.filter(user=trio.bob).exists()
    assert {bobs.access_token, bobs.refresh_token} <= set(server.revoked)
    # Alice's account and the client stay.
    assert McpOAuthToken.objects.filter(connection=per_user, user=trio.alice).exists()
    assert McpOAuthClient.objects.filter(connection=per_user).exists()


# -- a per-person connection shares nothing ---------------------------------------------------
def test_a_per_person_connection_refuses_a_context_resource_on_every_face(trio, server, per_user):
    from django.core.exceptions import ValidationError
    from rest_framework.test import APIClient

    from tools.mcp_connections import mcp_connection_save

    with pytest.raises(ValidationError) as refused:
        mcp_connection_save(tenant=trio.acme, connection=per_user,
                            changes={"context_resource_uri": "docs://handbook"})  # fmt: skip
    assert "context_resource_uri" in refused.value.message_dict
    api = login(APIClient(), trio.alice, tenant=trio.acme)
    answer = api.patch(f"/api/v1/mcp-connections/{per_user.pk}",
                       {"context_resource_uri": "docs://handbook"}, format="json")  # fmt: skip
    assert answer.status_code == 400
    assert "context_resource_uri" in answer.json()["error"]["details"]
    per_user.refresh_from_db()
    assert per_user.context_resource_uri == ""


# -- a trigger's run has no person ------------------------------------------------------------
def test_a_triggers_run_never_uses_its_members_own_account(
    trio, server, per_user, agent, provider_server
):
    from agents.triggers import fire_due_triggers, trigger_save
    from tenancy.models import Membership
    from tenancy.policy import Principal

    connect(login(Client(), trio.alice), server,
            f"/t/acme/mcp-connections/{per_user.pk}/connect/", "alice-at-crm")  # fmt: skip
    by = Principal.of_membership(Membership.objects.get(tenant=trio.acme, user=trio.alice))
    trigger = trigger_save(tenant=trio.acme, by=by, changes={
        "name": "nightly", "kind": "schedule", "agent": agent, "cron": "0 3 * * *",
        "timezone": "UTC", "input_template": "Who am I?"}).trigger  # fmt: skip
    assert trigger.run_as == trio.alice
    from django.utils import timezone

    from agents.models import Trigger

    Trigger.objects.filter(pk=trigger.pk).update(next_fire_at=timezone.now())
    provider_server.script(
        "openai", ToolCallReply([ToolCall("c1", "crm__whoami", "{}")]), TextReply("Done.")
    )
    assert fire_due_triggers() == 1
    run = Run.objects.get(trigger=trigger)
    execute_run(run.pk)
    events = str(list(RunEvent.objects.filter(run=run).values_list("payload", flat=True)))
    assert "this run has no person" in events and "a trigger's" in events
    assert "alice-at-crm" not in events  # her account was not used
    assert not RunEvent.objects.filter(run=run, type="account.connect_required").exists()


# -- hostile authorization servers ------------------------------------------------------------
def _token_answer(reply) -> str:
    from asgiref.sync import async_to_sync

    from tests.tools.local_server import LocalServer
    from tools.mcp_oauth.protocol import Client as OAuthClient
    from tools.mcp_oauth.protocol import OAuthHttp, OAuthProblem, token_request
    from tools.runtime.egress import EgressPolicy

    with LocalServer() as local:
        local.route("POST", "/token", reply)
        http = OAuthHttp(EgressPolicy(allowlist=("127.0.0.1/32",)), http_allowed=True)
        client = OAuthClient(f"{local.url}/token", "c", None, "none", f"{local.url}/mcp")
        try:
            tokens = async_to_sync(token_request)(http, client, {"grant_type": "x"})
        except OAuthProblem as exc:
            return str(exc)
    return f"expires_in={tokens.expires_in}"


def test_a_deep_or_endless_token_answer_is_refused_or_bounded():
    from tests.tools.local_server import Reply

    deep = Reply(body=b"[" * 60_000, headers={"content-type": "application/json"})
    assert _token_answer(deep) == "the token answer is not a JSON object"
    deep_error = Reply(status=400, body=b"[" * 60_000)
    assert _token_answer(deep_error) == "the token endpoint refused the request (HTTP 400)"

    def answer(expires: bytes) -> Reply:
        body = b'{"access_token": "a", "token_type": "Bearer", "expires_in": ' + expires + b"}"
        return Reply(body=body, headers={"content-type": "application/json"})

    assert _token_answer(answer(b"1e400")) == "expires_in=None"
    assert _token_answer(answer(b"-5")) == "expires_in=None"
    assert _token_answer(answer(b"NaN")) == "expires_in=None"
    assert _token_answer(answer(b"99999999999")) == f"expires_in={365 * 24 * 3600}"
    assert _token_answer(answer(b"3600")) == "expires_in=3600"


def test_a_short_lived_token_is_not_refreshed_at_every_call(trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    with FakeOAuthMcpServer(token_lifetime_s=40) as short:
        connection = make_mcp_connection(trio.acme, short.url, "docs", auth_mode="oauth_tenant")
        connect(login(Client(), trio.alice), short,
                f"/t/acme/mcp-connections/{connection.pk}/connect/", "acme-bot")  # fmt: skip
        first = access_token(connection=connection, user_id=None)
        assert access_token(connection=connection, user_id=None) == first
        assert short.refreshes == 0  # renewed in its last 20 s only


def test_discovery_refuses_a_server_listing_no_pkce_method():
    assert "does not support PKCE with S256" in hostile(
        {PRM: _prm, ASM: lambda base: {k: v for k, v in _asm(base).items()
                                       if k != "code_challenge_methods_supported"}}
    )  # fmt: skip


def test_the_callback_is_bound_to_the_client_the_flow_went_to(trio, server, per_user):
    bob = login(Client(), trio.bob)
    started = bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/connect/")
    back = authorize(server, authorization_url(started), "bob-at-crm")
    # Meanwhile the admin points the connection at another client ID (a raw update, so
    # that the client row stays and only the pending flow can tell).
    McpOAuthClient.objects.filter(connection=per_user).update(client_id="someone-else")
    refused = bob.get(back)
    assert refused.status_code == 400 and b"changed since this attempt began" in refused.content
    assert not McpOAuthToken.objects.filter(connection=per_user).exists()


def test_a_server_promising_iss_must_send_it(trio, server, per_user):
    from tools.mcp_oauth import flow

    bob = login(Client(), trio.bob)
    started = bob.post(f"/t/acme/mcp-accounts/{per_user.pk}/connect/")
    back = authorize(server, authorization_url(started), "bob-at-crm")
    session = bob.session
    flows = session[flow.SESSION_KEY]
    for pending in flows.values():
        pending["iss_required"] = True  # as discovery records for a server advertising it
    session[flow.SESSION_KEY] = flows
    session.save()
    refused = bob.get(back)
    assert refused.status_code == 400 and b"did not name itself" in refused.content


def test_deleting_a_tenant_with_connected_accounts_leaves_nothing(
    trio, server, per_user, django_capture_on_commit_callbacks
):
    from django.db import transaction

    from tenancy.models import AuditEntry

    _connect_both(trio, server, per_user)
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        trio.acme.delete()
    assert not McpOAuthToken.objects.exists() and not McpOAuthClient.objects.exists()
    assert not AuditEntry.objects.filter(tenant_id=per_user.tenant_id).exists()


def test_client_secret_basic_form_encodes_the_id_and_secret():
    """RFC 6749 §2.3.1: each is application/x-www-form-urlencoded before Base64 (the helper
    single sign-on and MCP OAuth share)."""
    import base64

    from asgiref.sync import async_to_sync

    from tests.tools.local_server import LocalServer, Reply
    from tools.mcp_oauth.protocol import Client as OAuthClient
    from tools.mcp_oauth.protocol import OAuthHttp, token_request
    from tools.runtime.egress import EgressPolicy

    with LocalServer() as local:
        local.route("POST", "/token", Reply(json={"access_token": "a", "token_type": "Bearer"}))
        http = OAuthHttp(EgressPolicy(allowlist=("127.0.0.1/32",)), http_allowed=True)
        client = OAuthClient(f"{local.url}/token", "app id:1", "s&e%cret", "client_secret_basic",
                             f"{local.url}/mcp")  # fmt: skip
        async_to_sync(token_request)(http, client, {"grant_type": "x"})
        [sent] = local.requests
    scheme, _, value = sent.headers["authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(value).decode() == "app+id%3A1:s%26e%25cret"
    assert b"s%26e%25cret" not in sent.body and b"client_secret" not in sent.body
