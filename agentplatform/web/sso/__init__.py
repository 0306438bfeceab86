"""Single sign-on with OpenID Connect (docs/sso.md): the sign-in views, the auth backend,
and the provider's endpoints reached through the guarded egress."""
