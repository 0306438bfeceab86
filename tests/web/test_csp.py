"""The Content-Security-Policy helpers: where a form may also send (the OAuth consent page
to its client's redirect URI), written only as a well-formed CSP source."""

from __future__ import annotations

import pytest

from agentplatform.web import csp


@pytest.mark.parametrize(
    ("url", "source"),
    [
        ("http://127.0.0.1:8765/callback?x=1", "http://127.0.0.1:8765"),
        ("http://localhost:33418/cb", "http://localhost:33418"),
        ("https://App.Example.com/oauth/cb", "https://app.example.com"),
        ("https://user:pw@example.com:8443/cb", "https://example.com:8443"),
        ("http://[::1]:8765/cb", "http:"),  # CSP cannot name an IPv6 host
        ("https://a;b.example/cb", None),  # nothing that would end the directive
        ("https://a b.example/cb", None),
        ("https://example.com:99999/cb", None),
        ("javascript:alert(1)", None),
        ("cursor://callback", None),
        ("", None),
    ],
)
def test_a_form_target_is_the_urls_origin_as_a_csp_source_or_nothing(url, source):
    assert csp.form_target_source(url) == source


def test_the_policy_lets_forms_also_go_to_the_target_and_nowhere_else():
    policy = csp.policy_with_form_target("http://127.0.0.1:8765")
    assert "form-action 'self' http://127.0.0.1:8765;" in policy
    assert policy.replace(" http://127.0.0.1:8765", "") == csp.POLICY
    assert csp.policy_with_form_target(None) == csp.POLICY
