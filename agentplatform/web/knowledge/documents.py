"""A knowledge base's documents: the list with each document's ingestion progress (htmx
polls the list while any is pending or processing), adding one (upload, pasted text or a
URL), re-ingesting and deleting."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    PlainLabels,
    add_service_errors,
    render_page,
)
from rag import selectors
from rag.models import DocumentStatus, KnowledgeBase
from rag.services import document_add, document_delete, document_reingest
from tenancy.policy import Action
from tenancy.request_budgets import budget_refusal
from tenancy.resolution import tenant_member_required

PAGE = "web/knowledge/documents.html"
ACTIVE = (DocumentStatus.PENDING, DocumentStatus.PROCESSING)


def limit_text() -> str:
    return f"{settings.RAG_MAX_DOCUMENT_BYTES / 2**20:g} MiB"


class DocumentForm(PlainLabels, forms.Form):
    """Exactly one source: a file, pasted text or a URL."""

    title = forms.CharField(
        max_length=300, required=False, help_text="Optional: taken from the source otherwise."
    )
    file = forms.FileField(
        required=False,
        label="Upload a file",
        help_text="Text, Markdown, HTML or PDF.",
    )
    text = forms.CharField(
        required=False,
        strip=False,
        label="Or paste text",
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="Plain text or Markdown; # headings become the chunks' heading paths.",
    )
    url = forms.URLField(
        required=False,
        max_length=2000,
        assume_scheme="https",
        label="Or a web page (URL)",
        help_text="Fetched by the worker.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["file"].help_text += f" At most {limit_text()}."

    def clean_file(self) -> Any:
        upload = self.cleaned_data.get("file")
        if upload is not None and upload.size > settings.RAG_MAX_DOCUMENT_BYTES:
            raise ValidationError(f"The file is larger than the limit of {limit_text()}.")
        return upload

    def clean_text(self) -> str:
        text = self.cleaned_data.get("text", "")
        if len(text.encode("utf-8", "surrogatepass")) > settings.RAG_MAX_DOCUMENT_BYTES:
            raise ValidationError(f"The text is larger than the limit of {limit_text()}.")
        return text if text.strip() else ""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        given = [name for name in ("file", "text", "url") if cleaned.get(name)]
        invalid = [name for name in ("file", "text", "url") if name in self.errors]
        if not invalid and len(given) != 1:
            raise ValidationError("Give exactly one source: a file, pasted text or a URL.")
        return cleaned


def documents_context(knowledge_base: KnowledgeBase) -> dict[str, Any]:
    documents = list(
        selectors.documents_of(tenant=knowledge_base.tenant, knowledge_base=knowledge_base)
    )
    return {
        "knowledge_base": knowledge_base,
        "documents": documents,
        "ingesting": any(d.status in ACTIVE for d in documents),
    }


@tenant_member_required(Action.READ_DATA)
def document_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The knowledge base's page; htmx asks for the document table only (while polling)."""
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    context = {**documents_context(knowledge_base), "form": DocumentForm()}
    return render_page(request, PAGE, context, partial="documents")


@tenant_member_required(Action.WRITE_DATA)
@require_POST
def document_create(request: HttpRequest, slug: str) -> HttpResponse:
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    form = DocumentForm(request.POST, request.FILES)
    status = 400
    if form.is_valid() and (refusal := budget_refusal(request.principal)) is not None:
        form.add_error(None, refusal)  # (ingesting it calls the embedder)
        status = 429
    elif form.is_valid():
        data = form.cleaned_data
        try:
            document = document_add(
                tenant=request.tenant,
                knowledge_base=knowledge_base,
                title=data["title"],
                text=data["text"] or None,
                upload=data["file"],
                url=data["url"] or None,
            )
        except ValidationError as error:
            add_service_errors(form, error)
        else:
            messages.success(request, f"Added “{document}”: it is being ingested.")
            return redirect("knowledge:documents", tenant_slug=request.tenant.slug, slug=slug)
    context = {**documents_context(knowledge_base), "form": form}
    return render_page(request, PAGE, context, status=status)


@tenant_member_required(Action.WRITE_DATA)
@require_POST
def document_reingest_view(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    document = selectors.document_get(
        tenant=request.tenant, knowledge_base=knowledge_base, document_id=pk
    )
    if (refusal := budget_refusal(request.principal)) is not None:
        messages.error(request, refusal)
        return redirect("knowledge:documents", tenant_slug=request.tenant.slug, slug=slug)
    try:
        document_reingest(tenant=request.tenant, document=document, force=True)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"Re-ingesting “{document}”.")
    return redirect("knowledge:documents", tenant_slug=request.tenant.slug, slug=slug)


@tenant_member_required(Action.WRITE_DATA)
def document_remove(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    document = selectors.document_get(
        tenant=request.tenant, knowledge_base=knowledge_base, document_id=pk
    )
    if request.method == "POST":
        document_delete(tenant=request.tenant, document=document)
        messages.success(request, f"Deleted document “{document}”.")
        return redirect("knowledge:documents", tenant_slug=request.tenant.slug, slug=slug)
    context = {
        "object": document,
        "what": "document",
        "consequence": "Its chunks are deleted with it; agents no longer find it.",
        "knowledge_base": knowledge_base,
        "cancel_url": "knowledge:documents",
    }
    return render_page(request, "web/knowledge/confirm_delete.html", context)
