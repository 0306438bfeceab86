"""A real OpenID Connect provider for the single sign-on tests: a tiny Django project of
its own (django-oauth-toolkit with OIDC on, RS256, its own SQLite database), started as a
second process on loopback by `tests/fakes/oidc_provider/process.py`.

Test knobs, all of them the provider's own behaviour: a user's groups become the `groups`
claim; a user whose first name is `wrong-aud`, `wrong-iss`, `expired` or `bad-nonce` gets
an ID token, properly signed, with that claim spoiled; `email-unverified` and
`email-not-verified` send the e-mail without `email_verified`, or with it false.
`POST /test/users` (JSON) creates or updates a user, so a test can change someone's groups
between two sign-ins.
"""
