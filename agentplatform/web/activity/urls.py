from __future__ import annotations

from django.urls import path

from agentplatform.web.activity import (
    approvals,
    audit_log,
    evaluations,
    resume,
    runs,
    usage_page,
    verification,
)

app_name = "activity"
urlpatterns = [
    path("runs/", runs.run_list, name="runs"),
    path("runs/<int:run_id>/", runs.run_detail, name="run"),
    path("runs/<int:run_id>/verify/", verification.verify_run, name="run_verify"),
    path("runs/<int:run_id>/resume/", resume.resume_run, name="run_resume"),
    path("approvals/", approvals.inbox, name="approvals"),
    path("approvals/<int:approval_id>/decide/", approvals.decide, name="approval_decide"),
    path("usage/", usage_page.usage_page, name="usage"),
    path("usage/export.csv", usage_page.usage_export, name="usage_export"),
    path("audit/", audit_log.audit_log, name="audit"),  # owners and admins
    # Evaluations (agentplatform/web/activity/evaluations.py, docs/evaluations.md)
    path("datasets/", evaluations.dataset_list, name="datasets"),
    path("datasets/new/", evaluations.dataset_create, name="dataset_create"),
    path("datasets/<int:dataset_id>/", evaluations.dataset_detail, name="dataset"),
    path("datasets/<int:dataset_id>/edit/", evaluations.dataset_edit, name="dataset_edit"),
    path("datasets/<int:dataset_id>/delete/", evaluations.dataset_remove, name="dataset_delete"),
    path("datasets/<int:dataset_id>/cases/new/", evaluations.case_create, name="case_create"),
    path(
        "datasets/<int:dataset_id>/cases/<int:case_id>/edit/",
        evaluations.case_edit,
        name="case_edit",
    ),
    path(
        "datasets/<int:dataset_id>/cases/<int:case_id>/delete/",
        evaluations.case_remove,
        name="case_delete",
    ),
    path("evaluations/", evaluations.evaluation_list, name="evaluations"),
    path("evaluations/start/", evaluations.evaluation_create, name="evaluation_create"),
    path("evaluations/<int:evaluation_id>/", evaluations.evaluation_detail, name="evaluation"),
    path(
        "evaluations/<int:evaluation_id>/cancel/",
        evaluations.evaluation_stop,
        name="evaluation_cancel",
    ),
    path(
        "evaluations/<int:evaluation_id>/compare/",
        evaluations.evaluation_compare_page,
        name="evaluation_compare",
    ),
    path("runs/<int:run_id>/feedback/", evaluations.run_feedback, name="run_feedback"),
    path("runs/<int:run_id>/add-to-dataset/", evaluations.run_to_dataset, name="run_to_dataset"),
]
