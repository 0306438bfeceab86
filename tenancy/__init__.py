"""Who is who and what they may do: tenants, members, API keys, the policy, row-level
security; `tenancy.records` (what changed and who did it) and `tenancy.sign_on` (SSO, the
OAuth server). Below every app, above `base`."""
