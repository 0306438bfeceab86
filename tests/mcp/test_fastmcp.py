"""fastmcp's client (from the clients' venv, `make py-clients`) against /mcp with a tenant key:
list the tools and call one, in its default mode (protocol 2026-07-28, which has no `ping`:
the SDK's server answers it "Method not found", as a bare SDK server does) and in its
legacy mode (with a ping)."""

from __future__ import annotations

import pytest

from tenancy import services as tenancy
from tests.api.test_frameworks import framework

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_fastmcp_lists_and_calls_tools(mcp_server, trio, mode):
    _, key = tenancy.api_key_create(tenant=trio.acme, name="fastmcp", scopes=["read", "run"])
    result = framework(mcp_server.removesuffix("/v1"), key, f"fastmcp_{mode}", url=mcp_server)
    assert result.get("error") is None, result
    assert "calculator" in result["tools"]
    assert result["result"] == {"result": 42}
    assert result["pinged"] is (True if mode == "legacy" else None)
