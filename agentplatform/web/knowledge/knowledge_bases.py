"""Knowledge bases: list, create and edit (embedder, chunking, the agents that search it),
delete."""

from __future__ import annotations

from copy import copy
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import (
    PlainLabels,
    add_service_errors,
    admin_required,
    render_page,
)
from agents.selectors import agents_by_name
from providers.selectors import connections_of
from rag import selectors
from rag.models import KnowledgeBase
from rag.services import knowledge_base_delete, knowledge_base_save
from tenancy.models import Tenant
from tenancy.records.saving import SaveConflict
from tenancy.selectors import value_taken
from tools.context_providers import Domain

FORM = "web/knowledge/knowledge_base_form.html"


class KnowledgeBaseForm(PlainLabels, forms.ModelForm):
    class Meta:
        model = KnowledgeBase
        fields = [
            "name", "slug", "description", "embedder", "provider_connection",
            "embedding_model", "dimensions", "chunk_size", "chunk_overlap", "agents", "domains",
        ]  # fmt: skip
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "embedder": forms.RadioSelect,
            "agents": forms.CheckboxSelectMultiple,
        }
        labels = {
            "chunk_size": "Chunk size (tokens)",
            "chunk_overlap": "Chunk overlap (tokens)",
            "agents": "Agents that search it",
        }
        help_texts = {
            "slug": "Lowercase letters, digits, _ and -; used in URLs and the API.",
            "agents": "These agents get a knowledge_search tool over this knowledge base.",
        }

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        connections = self.fields["provider_connection"]
        connections.queryset = connections_of(tenant=tenant)
        connections.empty_label = "—"
        self.fields["agents"].queryset = agents_by_name(tenant=tenant)
        self.fields["embedder"].choices = [c for c in self.fields["embedder"].choices if c[0] != ""]
        self.fields["domains"] = forms.MultipleChoiceField(
            choices=Domain.choices,
            required=False,
            widget=forms.CheckboxSelectMultiple,
            label="Capability domains",
            help_text="What it covers; shown where agents are configured.",
            initial=self.instance.domains,
        )

    def clean_slug(self) -> str:
        slug = self.cleaned_data["slug"]
        if value_taken(
            model=KnowledgeBase, tenant=self.tenant, field="slug", value=slug, but=self.instance.pk
        ):
            raise ValidationError("Another knowledge base of this workspace has this slug.")
        return slug

    def changes(self) -> dict[str, Any]:
        data = {name: self.cleaned_data[name] for name in self.Meta.fields}
        data["agents"] = list(data["agents"])
        return data


@admin_required
def knowledge_base_list(request: HttpRequest) -> HttpResponse:
    """One query: the knowledge bases with their document counts by status."""
    rows = selectors.knowledge_bases_with_counts(tenant=request.tenant)
    return render_page(request, "web/knowledge/knowledge_base_list.html", {"rows": rows})


@admin_required
def knowledge_base_create(request: HttpRequest) -> HttpResponse:
    return _knowledge_base_form(request, KnowledgeBase(tenant=request.tenant))


@admin_required
def knowledge_base_edit(request: HttpRequest, slug: str) -> HttpResponse:
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    return _knowledge_base_form(request, knowledge_base)


def _knowledge_base_form(request: HttpRequest, knowledge_base: KnowledgeBase) -> HttpResponse:
    tenant = request.tenant
    existing = knowledge_base.pk is not None
    # The form validates a copy: a refused slug must not reach this page's links.
    form = KnowledgeBaseForm(request.POST or None, instance=copy(knowledge_base), tenant=tenant)
    if request.method == "POST" and form.is_valid():
        try:
            saved = knowledge_base_save(
                tenant=tenant,
                knowledge_base=knowledge_base if existing else None,
                changes=form.changes(),
            )
        except (ValidationError, SaveConflict) as error:
            add_service_errors(form, error)
        else:
            messages.success(request, f"Saved knowledge base “{saved.name}”.")
            return redirect("knowledge:documents", tenant_slug=tenant.slug, slug=saved.slug)
    context = {"form": form, "knowledge_base": knowledge_base if existing else None}
    return render_page(request, FORM, context, status=400 if form.errors else 200)


@admin_required
def knowledge_base_remove(request: HttpRequest, slug: str) -> HttpResponse:
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    if request.method == "POST":
        knowledge_base_delete(tenant=request.tenant, knowledge_base=knowledge_base)
        messages.success(request, f"Deleted knowledge base “{knowledge_base.name}”.")
        return redirect("knowledge:index", tenant_slug=request.tenant.slug)
    context = {
        "object": knowledge_base,
        "what": "knowledge base",
        "consequence": "Its documents and their chunks are deleted with it.",
        "cancel_url": "knowledge:documents",
    }
    return render_page(request, "web/knowledge/confirm_delete.html", context)
