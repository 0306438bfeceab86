from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import include, path

from agentplatform.web import (
    account,
    health,
    home,
    invitations,
    mcp_accounts,
    memory,
    metrics,
    oauth,
    offboarding,
    views,
)
from agentplatform.web.sso import views as sso_views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("sso/callback/", sso_views.SSOCallbackView.as_view(), name="sso_callback"),
    path("sso/<slug:slug>/", sso_views.SSOStartView.as_view(), name="sso_start"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("invitations/<str:token>/", invitations.invitation, name="invitation"),
    path("account/", account.account, name="account"),
    path("account/leave/<slug:tenant_slug>/", account.leave, name="leave_tenant"),
    path(".well-known/oauth-authorization-server", oauth.metadata, name="oauth_metadata"),
    path(  # RFC 9728 §3.1: the prefix, then the resource's path (/mcp, or MCP_RESOURCE_URL's)
        ".well-known/oauth-protected-resource/<path:resource_path>",
        oauth.resource_metadata,
        name="oauth_resource_metadata",
    ),
    path("oauth/register", oauth.register, name="oauth_register"),
    path("oauth/authorize", oauth.authorize, name="oauth_authorize"),
    path("oauth/token", oauth.token, name="oauth_token"),
    path("mcp-oauth/callback", mcp_accounts.mcp_oauth_callback, name="mcp_oauth_callback"),
    path("mcp-oauth/client.json", mcp_accounts.mcp_oauth_client, name="mcp_oauth_client"),
    path("t/<slug:tenant_slug>/", home.tenant_home, name="tenant_home"),
    path("t/<slug:tenant_slug>/mcp-accounts/", mcp_accounts.mcp_accounts, name="mcp_accounts"),
    path(
        "t/<slug:tenant_slug>/mcp-accounts/<int:pk>/connect/",
        mcp_accounts.mcp_account_connect,
        name="mcp_account_connect",
    ),
    path(
        "t/<slug:tenant_slug>/mcp-accounts/<int:pk>/disconnect/",
        mcp_accounts.mcp_account_disconnect,
        name="mcp_account_disconnect",
    ),
    path("t/<slug:tenant_slug>/chat/", include("agentplatform.web.chat.urls")),
    path("t/<slug:tenant_slug>/memory/", memory.memory_page, name="memory"),
    path("t/<slug:tenant_slug>/my-data/", offboarding.my_data, name="my_data"),
    path(
        "t/<slug:tenant_slug>/my-data/download/",
        offboarding.my_data_download,
        name="my_data_download",
    ),
    path(
        "t/<slug:tenant_slug>/people/<int:user_id>/erase/",
        offboarding.person_erasure,
        name="person_erasure",
    ),
    path("t/<slug:tenant_slug>/erasure/", offboarding.tenant_erasure, name="tenant_erasure"),
    path("t/<slug:tenant_slug>/export/", offboarding.tenant_export, name="tenant_export"),
    path(
        "t/<slug:tenant_slug>/export/download/",
        offboarding.tenant_export_download,
        name="tenant_export_download",
    ),
    path("t/<slug:tenant_slug>/memory/<int:fact_id>/edit/", memory.fact_edit, name="fact_edit"),
    path(
        "t/<slug:tenant_slug>/memory/<int:fact_id>/delete/", memory.fact_delete, name="fact_delete"
    ),
    path("t/<slug:tenant_slug>/", include("agentplatform.web.activity.urls")),  # runs, usage
    path("t/<slug:tenant_slug>/", include("agentplatform.web.config.urls")),  # admins only
    path("t/<slug:tenant_slug>/knowledge/", include("agentplatform.web.knowledge.urls")),
]
