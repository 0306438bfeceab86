"""How people and clients sign on: single sign-on (the identity providers, who a signed-in
person is, what their groups make them) and the OAuth 2.1 server MCP clients use.

Its models (IdentityProvider, ExternalIdentity, OAuthClient, ...) stay in
tenancy/models.py with the app's others.
"""
