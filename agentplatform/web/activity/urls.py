from __future__ import annotations

from django.urls import path

from agentplatform.web.activity import approvals, audit_log, runs, usage_page, verification

app_name = "activity"
urlpatterns = [
    path("runs/", runs.run_list, name="runs"),
    path("runs/<int:run_id>/", runs.run_detail, name="run"),
    path("runs/<int:run_id>/verify/", verification.verify_run, name="run_verify"),
    path("approvals/", approvals.inbox, name="approvals"),
    path("approvals/<int:approval_id>/decide/", approvals.decide, name="approval_decide"),
    path("usage/", usage_page.usage_page, name="usage"),
    path("audit/", audit_log.audit_log, name="audit"),  # owners and admins
]
