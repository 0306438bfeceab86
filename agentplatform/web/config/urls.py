"""Configuration pages under /t/<tenant_slug>/, for owners and admins only (see
docs/web-config.md). Objects with slugs take a suffix (edit/, delete/) so that no slug
can shadow a fixed path such as new/."""

from __future__ import annotations

from django.urls import path

from agentplatform.web.config import (
    access,
    agents,
    api_keys,
    connections,
    crews,
    document,
    mcp_connections,
    members,
    prices,
    quotas,
    tools,
)

app_name = "config"
urlpatterns = [
    path("agents/", agents.agent_list, name="agents"),
    path("agents/new/", agents.agent_create, name="agent_create"),
    path("agents/effective-tools/", agents.agent_tools, name="agent_tools"),
    path("agents/<slug:slug>/edit/", agents.agent_edit, name="agent_edit"),
    path("agents/<slug:slug>/delete/", agents.agent_remove, name="agent_delete"),
    path("crews/", crews.crew_list, name="crews"),
    path("crews/new/", crews.crew_create, name="crew_create"),
    path("crews/<slug:slug>/edit/", crews.crew_edit, name="crew_edit"),
    path("crews/<slug:slug>/delete/", crews.crew_remove, name="crew_delete"),
    path("tools/", tools.tool_list, name="tools"),
    path("tools/new/", tools.tool_create, name="tool_create"),
    path("tools/<int:pk>/edit/", tools.tool_edit, name="tool_edit"),
    path("tools/<int:pk>/delete/", tools.tool_remove, name="tool_delete"),
    path("tools/try/<str:name>/", tools.tool_try, name="tool_try"),
    path("tools/try/<str:name>/selftest/", tools.tool_selftest, name="tool_selftest"),
    path("connections/", connections.connection_list, name="connections"),
    path("connections/new/", connections.connection_create, name="connection_create"),
    path("connections/<int:pk>/edit/", connections.connection_edit, name="connection_edit"),
    path("connections/<int:pk>/test/", connections.connection_check, name="connection_test"),
    path("connections/<int:pk>/delete/", connections.connection_remove, name="connection_delete"),
    path("prices/", prices.price_list, name="prices"),
    path("prices/new/", prices.price_create, name="price_create"),
    path("prices/<int:pk>/edit/", prices.price_edit, name="price_edit"),
    path("prices/<int:pk>/delete/", prices.price_remove, name="price_delete"),
    path("mcp-connections/", mcp_connections.mcp_connection_list, name="mcp_connections"),
    path(
        "mcp-connections/new/", mcp_connections.mcp_connection_create, name="mcp_connection_create"
    ),
    path(
        "mcp-connections/<int:pk>/edit/",
        mcp_connections.mcp_connection_edit,
        name="mcp_connection_edit",
    ),
    path(
        "mcp-connections/<int:pk>/test/",
        mcp_connections.mcp_connection_check,
        name="mcp_connection_test",
    ),
    path(
        "mcp-connections/<int:pk>/refresh/",
        mcp_connections.mcp_connection_reload,
        name="mcp_connection_refresh",
    ),
    path(
        "mcp-connections/<int:pk>/delete/",
        mcp_connections.mcp_connection_remove,
        name="mcp_connection_delete",
    ),
    path("document/", document.document_page, name="document"),
    path("document/download/", document.document_download, name="document_download"),
    path("api-keys/", api_keys.api_key_list, name="api_keys"),
    path("api-keys/new/", api_keys.api_key_new, name="api_key_create"),
    path("api-keys/<int:pk>/revoke/", api_keys.api_key_remove, name="api_key_revoke"),
    path("quotas/", quotas.quota_list, name="quotas"),
    path("quotas/<int:pk>/edit/", quotas.quota_edit, name="quota_edit"),
    path("quotas/<int:pk>/delete/", quotas.quota_remove, name="quota_delete"),
    path("members/", members.member_list, name="members"),
    path("groups/", access.group_list, name="groups"),
    path("groups/<int:pk>/members/", access.group_members, name="group_members"),
    path("groups/<int:pk>/delete/", access.group_remove, name="group_delete"),
    path("agents/<slug:slug>/access/", access.grants, {"kind": "agents"}, name="agent_grants"),
    path("crews/<slug:slug>/access/", access.grants, {"kind": "crews"}, name="crew_grants"),
    path("members/invite/", members.member_invite, name="member_invite"),
    path(
        "members/invitations/<int:pk>/revoke/",
        members.member_invitation_revoke,
        name="member_invitation_revoke",
    ),
    path("members/<int:pk>/role/", members.member_role, name="member_role"),
    path("members/<int:pk>/remove/", members.member_remove, name="member_remove"),
]
