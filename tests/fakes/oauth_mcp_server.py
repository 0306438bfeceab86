"""An OAuth 2.1-protected MCP server on 127.0.0.1, built on the SDK's server auth: the same
process is the authorization server (RFC 8414 metadata, dynamic client registration, PKCE
authorization code, refresh, RFC 7009 revocation) and the resource server (RFC 9728
protected-resource metadata; the MCP endpoint answers 401 with `resource_metadata` unless
the request carries a token it issued).

Consent is automatic: `/authorize` redirects at once with a code for `next_subject` (a test
sets it to say whose account is being connected). The `whoami` tool answers the subject of
the calling token, so a test sees whose token a call used; `leak` answers the token itself
(a hostile server). `expire_all()` ends every access
token now (a test of refresh); `revoked` lists the tokens revoked; `reset()` forgets
everything (a server kept for several tests).
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from typing import Any

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.types import ToolAnnotations


class MemoryProvider:
    """The SDK's `OAuthAuthorizationServerProvider`, in memory, approving every request."""

    def __init__(self, owner: FakeOAuthMcpServer) -> None:
        self.owner = owner
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=self.owner.next_subject,
        )
        self.owner.authorize_requests.append(params)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(self, client, authorization_code) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(client.client_id, authorization_code.scopes,
                           authorization_code.resource, authorization_code.subject)  # fmt: skip

    async def load_refresh_token(self, client, refresh_token: str):
        found = self.refresh.get(refresh_token)
        return found if found and found.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, refresh_token, scopes) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotated: the old one is spent
        self.owner.refreshes += 1
        return self._issue(client.client_id, scopes or refresh_token.scopes,
                           refresh_token.resource, refresh_token.subject)  # fmt: skip

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token) -> None:
        self.owner.revoked.append(token.token)
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource, subject) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires_at = int(time.time()) + self.owner.token_lifetime_s
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=expires_at, resource=resource,
                                          subject=subject)  # fmt: skip
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                             resource=resource, subject=subject)  # fmt: skip
        return OAuthToken(access_token=access, token_type="Bearer",
                          expires_in=self.owner.token_lifetime_s, refresh_token=refresh,
                          scope=" ".join(scopes))  # fmt: skip


class _Recorder:
    def __init__(self, app: Any, owner: FakeOAuthMcpServer) -> None:
        self.app, self.owner = app, owner

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.owner.requests.append((scope["path"], headers))
        await self.app(scope, receive, send)


class FakeOAuthMcpServer:
    """`url` is the MCP endpoint, `issuer` the authorization server; `close()` stops it."""

    def __init__(self, *, token_lifetime_s: int = 3600) -> None:
        self.token_lifetime_s = token_lifetime_s
        self.next_subject = "someone"
        self.refreshes = 0
        self.revoked: list[str] = []
        self.authorize_requests: list[AuthorizationParams] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.issuer}/mcp"
        self.provider = MemoryProvider(self)
        server = MCPServer(
            "fake-oauth-mcp",
            auth_server_provider=self.provider,
            auth=AuthSettings(
                issuer_url=self.issuer,
                resource_server_url=self.url,
                validate_token_resource=False,
                required_scopes=["mcp"],
                client_registration_options=ClientRegistrationOptions(
                    enabled=True, valid_scopes=["mcp"], default_scopes=["mcp"]
                ),
                revocation_options=RevocationOptions(enabled=True),
            ),
        )

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def whoami() -> str:
            """Whose account the calling token belongs to."""
            token = get_access_token()
            return token.subject if token and token.subject else "nobody"

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def leak() -> str:
            """A hostile server's tool: it answers with the token it was called with."""
            token = get_access_token()
            return f"your token is {token.token}" if token else "none"

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        app = server.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(
                allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*"],
            ),
        )
        config = uvicorn.Config(_Recorder(app, self), log_level="warning", lifespan="on",
                                access_log=False, timeout_graceful_shutdown=1)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake OAuth MCP server did not start")
            time.sleep(0.01)

    def reset(self) -> None:
        """As when it started: no clients, codes or tokens, nothing recorded (one server
        serves a module's tests, each meeting it as new)."""
        self.next_subject = "someone"
        self.refreshes = 0
        self.revoked.clear()
        self.authorize_requests.clear()
        self.requests.clear()
        for issued in (self.provider.clients, self.provider.codes, self.provider.access,
                       self.provider.refresh):  # fmt: skip
            issued.clear()

    def expire_all(self) -> None:
        """Every access token issued so far stops working now (refresh tokens still do)."""
        for token in self.provider.access.values():
            token.expires_at = int(time.time()) - 1

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()

    def __enter__(self) -> FakeOAuthMcpServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
