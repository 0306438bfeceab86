"""The MCP server at /mcp: each tenant's tools, agents and crews for MCP clients.

`asgi.with_mcp` mounts it beside Django; `auth` turns a tenant API key into the caller;
`server` lists and calls through the tenant's registry and the run services.
"""
