"""OAuth 2.1 for remote MCP servers (issue #38): what the rest of the project uses.

protocol.py     the exchanges with an authorization server, over guarded egress (no
                Django): discovery (RFC 9728, RFC 8414 / OIDC), registration (RFC 7591),
                PKCE, token requests, revocation (RFC 7009)
flow.py         connecting an account: begun on the platform, completed at its callback
tokens.py       tokens stored encrypted, refreshed under a row lock, revoked
credentials.py  a call's Authorization header: the tenant's token or the person's own;
                a person not connected pauses the run ("connect your account")
forgetting.py   a connection's URL, mode or client ID changed, a member left: their
                tokens (and client registration) deleted, revoked after the commit
models.py       McpOAuthClient, McpOAuthToken
"""

from tools.mcp_oauth.credentials import CONNECT_EVENT, OAuthCredentials, connect_url
from tools.mcp_oauth.flow import (
    Connected,
    client_metadata_document,
    client_source,
    connect_begin,
    connect_complete,
)
from tools.mcp_oauth.forgetting import oauth_forget_if_moved, oauth_forget_member
from tools.mcp_oauth.protocol import OAuthProblem
from tools.mcp_oauth.tokens import (
    NotConnected,
    RefreshFailed,
    access_token,
    account_connected,
    connected_account,
    listing_token,
    token_revoke,
)

__all__ = [
    "CONNECT_EVENT",
    "Connected",
    "NotConnected",
    "OAuthCredentials",
    "OAuthProblem",
    "RefreshFailed",
    "access_token",
    "account_connected",
    "client_metadata_document",
    "client_source",
    "connect_begin",
    "connect_complete",
    "connect_url",
    "connected_account",
    "listing_token",
    "oauth_forget_if_moved",
    "oauth_forget_member",
    "token_revoke",
]
