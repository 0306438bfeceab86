"""Workflows: list, create and edit (the document as JSON; the compiler's problems shown at
their paths beside it), delete."""

from __future__ import annotations

from copy import copy
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import (
    JsonTextarea,
    PlainLabels,
    PrettyJSONField,
    admin_required,
    confirm_delete,
    render_form,
    render_page,
    try_save,
    unique_in_tenant,
)
from agents import workflows
from agents.models import WorkflowDefinition

STARTER = {
    "input": {"type": "object", "properties": {"text": {"type": "string"}}},
    "steps": [{"id": "words", "transform": "length(input.text)"}],
}


class WorkflowForm(PlainLabels, forms.ModelForm):
    definition = PrettyJSONField(
        label="Document (JSON)",
        widget=JsonTextarea(attrs={"rows": 24}),
        help_text="The workflow as JSON: input (a JSON Schema), steps (tool, agent, transform, "
        "parallel, branch; each with an id), output (a JSON Schema). Expressions are JMESPath "
        "over input and the earlier steps' outputs by id.",
    )

    class Meta:
        model = WorkflowDefinition
        fields = ["name", "slug", "description", "definition", "expose_as_tool", "enabled"]
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}
        labels = {"expose_as_tool": "Offer it as a tool (to agents and over MCP)"}

    def clean_slug(self) -> str:
        return unique_in_tenant(self, "slug", "workflow")

    def clean_definition(self) -> Any:
        value = self.cleaned_data["definition"]
        if not isinstance(value, dict):
            raise ValidationError("Give a JSON object.")
        return value

    def changes(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}


@admin_required
def workflow_list(request: HttpRequest) -> HttpResponse:
    rows = workflows.workflows_of(tenant=request.tenant)
    return render_page(request, "web/config/workflow_list.html", {"workflows": rows})


@admin_required
def workflow_create(request: HttpRequest) -> HttpResponse:
    return _workflow_form(request, WorkflowDefinition(tenant=request.tenant, definition=STARTER))


@admin_required
def workflow_edit(request: HttpRequest, slug: str) -> HttpResponse:
    return _workflow_form(request, workflows.workflow_get(tenant=request.tenant, slug=slug))


def _workflow_form(request: HttpRequest, workflow: WorkflowDefinition) -> HttpResponse:
    tenant = request.tenant
    existing = workflow.pk is not None
    # The form validates a copy: a refused slug must not reach this page's links.
    form = WorkflowForm(request.POST or None, instance=copy(workflow))

    def save() -> WorkflowDefinition:
        try:
            return workflows.workflow_save(
                tenant=tenant, workflow=workflow if existing else None, changes=form.changes()
            )
        except workflows.WorkflowInvalid as refused:  # each problem at its path
            problems = [f"{p.path or 'the workflow'}: {p.reason}" for p in refused.problems]
            raise ValidationError({"definition": problems}) from None

    if try_save(request, form, save, "workflow"):
        return redirect("config:workflows", tenant_slug=tenant.slug)
    context = {"form": form, "workflow": workflow if existing else None}
    return render_form(request, "web/config/workflow_form.html", context)


@admin_required
def workflow_remove(request: HttpRequest, slug: str) -> HttpResponse:
    workflow = workflows.workflow_get(tenant=request.tenant, slug=slug)
    return confirm_delete(
        request, workflow, what="workflow", cancel="config:workflows",
        delete=lambda: workflows.workflow_delete(tenant=request.tenant, workflow=workflow),
    )  # fmt: skip
