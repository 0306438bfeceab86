from __future__ import annotations

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from agentplatform.api import (
    admin_api,
    agents_api,
    attachments_api,
    audit_api,
    config_api,
    conversations_api,
    history_api,
    identity_providers_api,
    mcp_accounts_api,
    mcp_connections_api,
    prices_api,
    providers_api,
    quotas_api,
    retention_api,
    sign_in_api,
    skills_api,
    time_zone_api,
    tool_drafts_api,
    tool_imports_api,
    tools_api,
    views,
    workflows_api,
)

# -- resources: agents, crews, tools, provider connections, conversations, facts, admin --
resources = SimpleRouter(trailing_slash=False)
resources.register("agents", agents_api.AgentViewSet, basename="api_agent")
resources.register("crews", agents_api.CrewViewSet, basename="api_crew")
resources.register("workflows", workflows_api.WorkflowViewSet, basename="api_workflow")
resources.register("tools", tools_api.ToolViewSet, basename="api_tool")
resources.register(
    "provider-connections", providers_api.ProviderConnectionViewSet, basename="api_provider"
)
resources.register("model-aliases", providers_api.ModelAliasViewSet, basename="api_model_alias")
resources.register(
    "mcp-connections", mcp_connections_api.McpConnectionViewSet, basename="api_mcp_connection"
)
resources.register("prices", prices_api.ModelPriceViewSet, basename="api_price")
resources.register(
    "conversations", conversations_api.ConversationViewSet, basename="api_conversation"
)
resources.register("facts", agents_api.FactViewSet, basename="api_fact")
resources.register("skills", skills_api.SkillViewSet, basename="api_skill")
resources.register(
    r"conversations/(?P<conversation>[^/]+)/attachments",
    attachments_api.AttachmentViewSet,
    basename="api_attachment",
)
resources.register("api-keys", admin_api.ApiKeyViewSet, basename="api_key")
resources.register("members", admin_api.MemberViewSet, basename="api_member")
resources.register("invitations", admin_api.InvitationViewSet, basename="api_invitation")
resources.register("audit-log", audit_api.AuditLogViewSet, basename="api_audit_log")
resources.register("quotas", quotas_api.QuotaViewSet, basename="api_quota")
resources.register(
    "identity-providers",
    identity_providers_api.IdentityProviderViewSet,
    basename="api_identity_provider",
)

# -- configuration history (agentplatform/api/history_api.py): each resource's own lookup --
history_urls = []
for _kind, _lookup in history_api.LOOKUPS.items():
    _object = rf"^{_kind}/(?P<{_lookup}>[^/]+)/versions"
    history_urls += [
        re_path(
            rf"{_object}$",
            history_api.VersionList.as_view(),
            {"kind": _kind},
            name=f"api_versions_{_kind}",
        ),
        re_path(
            rf"{_object}/(?P<number>[^/]+)$",
            history_api.VersionDetail.as_view(),
            {"kind": _kind},
            name=f"api_version_{_kind}",
        ),
        re_path(
            rf"{_object}/(?P<number>[^/]+)/restore$",
            history_api.VersionRestore.as_view(),
            {"kind": _kind},
            name=f"api_version_restore_{_kind}",
        ),
    ]

urlpatterns = [
    path("whoami", views.WhoAmI.as_view(), name="api_whoami"),
    *history_urls,
    path("config", config_api.ConfigDocumentView.as_view(), name="api_config"),
    path("sign-in", sign_in_api.SignInView.as_view(), name="api_sign_in"),
    path("time-zone", time_zone_api.TimeZoneView.as_view(), name="api_time_zone"),
    path("mcp-accounts", mcp_accounts_api.McpAccountsView.as_view(), name="api_mcp_accounts"),
    path(
        "mcp-accounts/<int:pk>", mcp_accounts_api.McpAccountView.as_view(), name="api_mcp_account"
    ),
    # (before the tools resource, whose `tools/{name}` would take `tools/try`, `tools/import`)
    path("tools/import/curl", tool_drafts_api.ToolImportCurl.as_view(), name="api_tool_curl"),
    path("tools/try", tool_drafts_api.ToolTry.as_view(), name="api_tool_try"),
    path("tools/import", tool_imports_api.ToolImport.as_view(), name="api_tool_import"),
    path(
        "tools/import/preview",
        tool_imports_api.ToolImportPreview.as_view(),
        name="api_tool_import_preview",
    ),
    path("retention", retention_api.RetentionView.as_view(), name="api_retention"),
    path("retention/holds", retention_api.HoldsView.as_view(), name="api_retention_holds"),
    path(
        "retention/holds/<str:conversation>",
        retention_api.HoldView.as_view(),
        name="api_retention_hold",
    ),
    *resources.urls,
]

# -- runs (agentplatform/api/runs.py): append the runs routes below this line --
from agentplatform.api import runs  # noqa: E402

urlpatterns += [
    path("runs", runs.RunListCreate.as_view(), name="api_runs"),
    path("runs/<str:run_id>", runs.RunDetail.as_view(), name="api_run"),
    path("runs/<str:run_id>/events", runs.RunEvents.as_view(), name="api_run_events"),
    path("runs/<str:run_id>/cancel", runs.RunCancel.as_view(), name="api_run_cancel"),
    path("runs/<str:run_id>/resume", runs.RunResume.as_view(), name="api_run_resume"),
    path("runs/<str:run_id>/verifications", runs.RunVerify.as_view(), name="api_run_verify"),
    path(
        "runs/<str:run_id>/approvals/<str:approval_id>",
        runs.RunApprovalDecide.as_view(),
        name="api_run_approval",
    ),
]

# -- queueing and steering (agentplatform/api/steering_api.py) --
from agentplatform.api import steering_api  # noqa: E402

urlpatterns += [
    path("runs/<str:run_id>/steer", steering_api.RunSteer.as_view(), name="api_run_steer"),
    path(
        "conversations/<str:conversation_id>/queue",
        steering_api.ConversationQueue.as_view(),
        name="api_conversation_queue",
    ),
    path(
        "conversations/<str:conversation_id>/queue/<str:queued_id>",
        steering_api.ConversationQueuedMessage.as_view(),
        name="api_conversation_queued",
    ),
]

# -- knowledge bases (agentplatform/api/knowledge_api.py) --
from agentplatform.api import knowledge_api  # noqa: E402

knowledge = SimpleRouter(trailing_slash=False)
knowledge.register(
    "knowledge-bases", knowledge_api.KnowledgeBaseViewSet, basename="api_knowledge_base"
)
knowledge.register(
    r"knowledge-bases/(?P<kb>[^/]+)/documents",
    knowledge_api.DocumentViewSet,
    basename="api_knowledge_document",
)
urlpatterns += knowledge.urls

# -- datasets, evaluations, feedback (agentplatform/api/evaluations_api.py) --
from agentplatform.api import evaluations_api as evals  # noqa: E402

urlpatterns += [
    path("datasets", evals.DatasetListCreate.as_view(), name="api_datasets"),
    path("datasets/<str:dataset_id>", evals.DatasetDetail.as_view(), name="api_dataset"),
    path("datasets/<str:dataset_id>/cases", evals.CaseListCreate.as_view(), name="api_cases"),
    path(
        "datasets/<str:dataset_id>/cases/<str:case_id>",
        evals.CaseDetail.as_view(),
        name="api_case",
    ),
    path("evaluations", evals.EvaluationListCreate.as_view(), name="api_evaluations"),
    path(
        "evaluations/<str:evaluation_id>",
        evals.EvaluationDetail.as_view(),
        name="api_evaluation",
    ),
    path(
        "evaluations/<str:evaluation_id>/cancel",
        evals.EvaluationCancel.as_view(),
        name="api_evaluation_cancel",
    ),
    path(
        "evaluations/<str:evaluation_id>/compare/<str:other_id>",
        evals.EvaluationCompare.as_view(),
        name="api_evaluation_compare",
    ),
    path("runs/<str:run_id>/feedback", evals.RunFeedback.as_view(), name="api_run_feedback"),
]

# -- an agent's or crew's drafts, published only when they pass (agentplatform/api/drafts_api.py) --
from agentplatform.api import drafts_api  # noqa: E402

urlpatterns += [
    path("agents/<str:slug>/drafts", drafts_api.DraftList.as_view(), name="api_agent_drafts"),
    path(
        "agents/<str:slug>/drafts/<str:draft_id>",
        drafts_api.DraftDetail.as_view(),
        name="api_agent_draft",
    ),
    path(
        "agents/<str:slug>/drafts/<str:draft_id>/publish",
        drafts_api.DraftPublish.as_view(),
        name="api_agent_draft_publish",
    ),
    path(
        "agents/<str:slug>/drafts/<str:draft_id>/discard",
        drafts_api.DraftDiscard.as_view(),
        name="api_agent_draft_discard",
    ),
    path(
        "crews/<str:slug>/drafts",
        drafts_api.DraftList.as_view(crew=True),
        name="api_crew_drafts",
    ),
    path(
        "crews/<str:slug>/drafts/<str:draft_id>",
        drafts_api.DraftDetail.as_view(crew=True),
        name="api_crew_draft",
    ),
    path(
        "crews/<str:slug>/drafts/<str:draft_id>/publish",
        drafts_api.DraftPublish.as_view(crew=True),
        name="api_crew_draft_publish",
    ),
    path(
        "crews/<str:slug>/drafts/<str:draft_id>/discard",
        drafts_api.DraftDiscard.as_view(crew=True),
        name="api_crew_draft_discard",
    ),
]

# -- triggers: schedules and webhooks (agentplatform/api/triggers_api.py) --
from agentplatform.api import triggers_api  # noqa: E402

urlpatterns += [
    path("triggers", triggers_api.TriggerListCreate.as_view(), name="api_triggers"),
    path("triggers/<str:trigger_id>", triggers_api.TriggerDetail.as_view(), name="api_trigger"),
    path(
        "triggers/<str:trigger_id>/rotate-secret",
        triggers_api.TriggerRotateSecret.as_view(),
        name="api_trigger_rotate",
    ),
    path(
        "triggers/<str:trigger_id>/runs",
        triggers_api.TriggerRuns.as_view(),
        name="api_trigger_runs",
    ),
]

# -- usage and cost (agentplatform/api/usage_api.py) --
from agentplatform.api import usage_api  # noqa: E402

urlpatterns += [
    path("usage", usage_api.UsageReport.as_view(), name="api_usage"),
    path("usage/export", usage_api.UsageExport.as_view(), name="api_usage_export"),
]

# -- a person's data: their export, an admin's erasure (agentplatform/api/offboarding_api.py) --
from agentplatform.api import offboarding_api  # noqa: E402

urlpatterns += [
    path("me/export", offboarding_api.MyDataExport.as_view(), name="api_my_data_export"),
    path(
        "people/<str:user_id>/erasure",
        offboarding_api.PersonErasure.as_view(),
        name="api_person_erasure",
    ),
    path("tenant/export", offboarding_api.TenantExportView.as_view(), name="api_tenant_export"),
    path(
        "tenant/export/download",
        offboarding_api.TenantExportDownload.as_view(),
        name="api_tenant_export_download",
    ),
]
# Last: what no route above matched.
urlpatterns.append(re_path(r"^(?P<rest>.*)$", views.unknown_path, name="api_unknown_path"))
