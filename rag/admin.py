"""Knowledge bases, documents and chunks in the tenant-scoped admin.

Writes go through `rag.services`: saving a knowledge base (which re-ingests its documents
when the embedder or chunking changes), adding a document (upload, pasted text or URL;
queued for ingestion), re-ingesting and deleting. Chunks are read-only. Each knowledge
base has a search tester page.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.db.models.functions import Length
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html

from agents import quotas
from rag.models import Chunk, Document, KnowledgeBase
from rag.runtime.embeddings import EmbeddingError
from rag.search import MAX_TOP_K, MODES
from rag.services import (
    document_add,
    document_delete,
    document_reingest,
    knowledge_base_delete,
    knowledge_base_save,
    search,
)
from tenancy.request_budgets import user_budget_refusal
from tenancy.scoped_admin import ReadOnlyAdmin, TenantScopedAdmin, TenantScopedForm

KNOWLEDGE_BASE_FIELDS = [
    "name", "slug", "description", "embedder", "provider_connection", "embedding_model",
    "dimensions", "chunk_size", "chunk_overlap", "agents", "domains",
]  # fmt: skip


class ChunksFollowTheirDocuments:
    """Deleting a knowledge base or document deletes its chunks (and documents), which no
    one may delete on their own: their lack of a delete permission must not block it."""

    def get_deleted_objects(self, objs, request):
        deleted, model_count, _perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, model_count, set(), protected


def _copy_saved(target: Any, saved: Any) -> None:
    """Make the admin's object the row the service saved (the admin logs and redirects
    with it)."""
    for field in saved._meta.concrete_fields:
        setattr(target, field.attname, getattr(saved, field.attname))
    target._state.adding = False
    target._state.db = saved._state.db


# -- knowledge bases ---------------------------------------------------------------------
class KnowledgeBaseForm(TenantScopedForm):
    class Meta:
        model = KnowledgeBase
        fields = ["tenant", *KNOWLEDGE_BASE_FIELDS]
        widgets = {"description": forms.Textarea(attrs={"rows": 3, "cols": 80})}


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(ChunksFollowTheirDocuments, TenantScopedAdmin):
    form = KnowledgeBaseForm
    list_display = ["name", "slug", "embedder", "document_count", "agent_list", "search_link"]
    list_filter = ["embedder"]
    search_fields = ["name", "slug", "description"]
    filter_horizontal = ["agents"]
    readonly_fields = [
        "documents_link", "search_link", "health_status", "health_reason", "health_checked_at",
        "created_at", "updated_at",
    ]  # fmt: skip

    def get_queryset(self, request):
        queryset = super().get_queryset(request).prefetch_related("agents")
        return queryset.annotate(document_total=Count("documents", distinct=True))

    @admin.display(description="Documents", ordering="document_total")
    def document_count(self, obj: KnowledgeBase) -> int:
        return getattr(obj, "document_total", 0)

    @admin.display(description="Agents")
    def agent_list(self, obj: KnowledgeBase) -> str:
        return ", ".join(agent.slug for agent in obj.agents.all()) or "—"

    @admin.display(description="Search tester")
    def search_link(self, obj: KnowledgeBase) -> str:
        if obj.pk is None:
            return "—"
        url = reverse("admin:rag_knowledgebase_search", args=[obj.pk])
        return format_html('<a href="{}">Search</a>', url)

    @admin.display(description="Documents")
    def documents_link(self, obj: KnowledgeBase) -> str:
        if obj.pk is None:
            return "—"
        url = reverse("admin:rag_document_changelist") + f"?knowledge_base__id__exact={obj.pk}"
        return format_html('<a href="{}">{} documents</a>', url, obj.documents.count())

    def save_model(self, request, obj: KnowledgeBase, form, change) -> None:
        if not self._may(request, obj):
            raise Http404("No such knowledge base.")
        stored = KnowledgeBase.objects.get(pk=obj.pk) if change else None
        changes = {
            name: form.cleaned_data[name]
            for name in KNOWLEDGE_BASE_FIELDS
            if name in form.cleaned_data and (not change or name in form.changed_data)
        }
        if "agents" in changes:
            changes["agents"] = list(changes["agents"])
        saved = knowledge_base_save(tenant=obj.tenant, knowledge_base=stored, changes=changes)
        _copy_saved(obj, saved)

    def save_related(self, request, form, formsets, change) -> None:
        for formset in formsets:  # the agents were set by the service
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request, obj: KnowledgeBase) -> None:
        if not self._may(request, obj):
            raise Http404("No such knowledge base.")
        knowledge_base_delete(tenant=obj.tenant, knowledge_base=obj)

    def delete_queryset(self, request, queryset) -> None:
        ids = self._tenant_ids(request)
        if ids is not None:
            queryset = queryset.filter(tenant_id__in=ids)
        for knowledge_base in queryset.select_related("tenant"):
            knowledge_base_delete(tenant=knowledge_base.tenant, knowledge_base=knowledge_base)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/search/", view(self.search_view), name="rag_knowledgebase_search"),
            *super().get_urls(),
        ]

    def search_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Searches the knowledge base as an agent's knowledge_search would (the embedder
        may make one network call)."""
        knowledge_base = self.get_queryset(request).filter(pk=pk).first()
        if knowledge_base is None or not self.has_view_permission(request, knowledge_base):
            raise Http404("No such knowledge base.")
        form = AdminSearchForm(request.POST or None, knowledge_base=knowledge_base)
        hits = None
        status = 200
        searching = request.method == "POST" and form.is_valid()
        refusal = user_budget_refusal(request.user, knowledge_base.tenant) if searching else None
        if refusal is not None:
            form.add_error(None, refusal)
            status = 429
        elif searching:
            try:
                hits = search(
                    tenant=knowledge_base.tenant,
                    knowledge_base_ids=[knowledge_base.pk],
                    query=form.cleaned_data["query"],
                    top_k=form.cleaned_data["top_k"],
                    mode=form.cleaned_data["mode"],
                    meter=quotas.Meter.for_initiator(knowledge_base.tenant_id, request.user),
                )
            except EmbeddingError as error:
                form.add_error(None, str(error))
            except quotas.QuotaExceeded as error:  # (a ValidationError: its message)
                form.add_error(None, str(error))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Search {knowledge_base.name}",
            "opts": self.opts,
            "knowledge_base": knowledge_base,
            "form": form,
            "hits": hits,
        }
        return render(request, "admin/rag/search.html", context, status=status)


class AdminSearchForm(forms.Form):
    query = forms.CharField(
        max_length=2000, widget=forms.TextInput(attrs={"size": 60, "autofocus": True})
    )
    top_k = forms.IntegerField(min_value=1, max_value=MAX_TOP_K, initial=5, label="Hits")
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="hybrid")

    def __init__(self, *args: Any, knowledge_base: KnowledgeBase, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not knowledge_base.embeds:
            self.fields["mode"].choices = [("lexical", "lexical (full-text only)")]
            self.fields["mode"].initial = "lexical"


# -- documents -----------------------------------------------------------------------------
class DocumentAddForm(TenantScopedForm):
    """A new document from exactly one source; the service stores and queues it. Adding
    one counts against the admin's request budget (ingesting it calls the embedder):
    `DocumentAdmin.get_form` names who adds it."""

    adding_user: Any = None

    upload = forms.FileField(required=False, label="File", help_text="Text, Markdown, HTML or PDF.")
    text = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs={"rows": 10, "cols": 80})
    )
    source_url = forms.URLField(
        required=False, max_length=2000, assume_scheme="https", label="URL",
        help_text="A web page, fetched by the worker.",
    )  # fmt: skip

    class Meta:
        model = Document
        fields = ["knowledge_base", "title"]

    def clean_upload(self) -> Any:
        upload = self.cleaned_data.get("upload")
        limit = settings.RAG_MAX_DOCUMENT_BYTES
        if upload is not None and upload.size > limit:
            raise ValidationError(f"The file is larger than the limit of {limit / 2**20:g} MiB.")
        return upload

    def clean_text(self) -> str:
        text = self.cleaned_data.get("text", "")
        if text and not text.strip():
            raise ValidationError("The text is empty.")
        limit = settings.RAG_MAX_DOCUMENT_BYTES
        if len(text.encode("utf-8", "surrogatepass")) > limit:
            raise ValidationError(f"The text is larger than the limit of {limit / 2**20:g} MiB.")
        return text

    def clean(self) -> dict[str, Any]:
        knowledge_base = self.cleaned_data.get("knowledge_base")
        if knowledge_base is not None and self.instance.tenant_id is None:
            self.instance.tenant = knowledge_base.tenant
        cleaned = super().clean()
        sources = [n for n in ("upload", "text", "source_url") if cleaned.get(n)]
        if not any(n in self.errors for n in ("upload", "text", "source_url")) and (
            len(sources) != 1
        ):
            raise ValidationError("Give exactly one source: a file, text or a URL.")
        if not self.errors and knowledge_base is not None and self.adding_user is not None:
            refusal = user_budget_refusal(self.adding_user, knowledge_base.tenant)
            if refusal is not None:
                raise ValidationError(refusal)
        return cleaned

    def _post_clean(self) -> None:
        # The service builds and validates the document; only the relation is checked here.
        pass


DOCUMENT_FIELDS = [
    "title", "knowledge_base", "source", "url", "filename", "content_type", "size",
    "checksum", "status", "progress", "error", "chunk_count", "token_count", "chunks_link",
    "created_at", "updated_at",
]  # fmt: skip


@admin.register(Document)
class DocumentAdmin(ChunksFollowTheirDocuments, TenantScopedAdmin):
    """Documents are added through the add form and otherwise change only by ingestion:
    their pages are read-only; re-ingest and delete are list actions."""

    list_display = [
        "__str__", "knowledge_base", "source", "status", "progress_percent", "chunk_count",
        "short_error", "updated_at",
    ]  # fmt: skip
    list_filter = ["status", "source", "knowledge_base"]
    list_select_related = ["knowledge_base"]
    search_fields = ["title", "filename", "url"]
    actions = ["reingest_selected", "delete_selected"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("content").annotate(size=Length("content"))

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = DocumentAddForm
        form = super().get_form(request, obj, change=change, **kwargs)
        form.adding_user = request.user  # (a class made for this request)
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["knowledge_base", "title", "upload", "text", "source_url"]
        return DOCUMENT_FIELDS

    def get_readonly_fields(self, request, obj=None):
        return DOCUMENT_FIELDS if obj is not None else []

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_reingest_permission(self, request) -> bool:
        return self._may(request, None)

    @admin.display(description="Progress", ordering="progress")
    def progress_percent(self, obj: Document) -> str:
        return f"{obj.progress}%"

    @admin.display(description="Size (bytes)")
    def size(self, obj: Document) -> int:
        return getattr(obj, "size", None) or 0

    @admin.display(description="Error")
    def short_error(self, obj: Document) -> str:
        return obj.error if len(obj.error) <= 120 else obj.error[:117] + "…"

    @admin.display(description="Chunks")
    def chunks_link(self, obj: Document) -> str:
        url = reverse("admin:rag_chunk_changelist") + f"?document__id__exact={obj.pk}"
        return format_html('<a href="{}">{} chunks</a>', url, obj.chunk_count)

    def save_model(self, request, obj: Document, form, change) -> None:
        data = form.cleaned_data
        knowledge_base = data["knowledge_base"]
        if change or not self._may(request, knowledge_base):
            raise Http404("No such knowledge base.")
        saved = document_add(
            tenant=knowledge_base.tenant,
            knowledge_base=knowledge_base,
            title=data.get("title", ""),
            text=data.get("text") or None,
            upload=data.get("upload"),
            url=data.get("source_url") or None,
        )
        _copy_saved(obj, saved)

    def save_related(self, request, form, formsets, change) -> None:
        pass  # a document has no many-to-many relations or inlines

    def delete_model(self, request, obj: Document) -> None:
        if not self._may(request, obj):
            raise Http404("No such document.")
        document_delete(tenant=obj.tenant, document=obj)

    def delete_queryset(self, request, queryset: QuerySet[Document]) -> None:
        ids = self._tenant_ids(request)
        if ids is not None:
            queryset = queryset.filter(tenant_id__in=ids)
        for document in queryset.select_related("tenant"):
            document_delete(tenant=document.tenant, document=document)

    @admin.action(description="Re-ingest selected documents", permissions=["reingest"])
    def reingest_selected(self, request, queryset: QuerySet[Document]) -> None:
        """Counts once against the admin's request budget in each tenant of the selection
        (ingesting calls the embedder): past one, nothing is queued."""
        documents = [d for d in queryset.select_related("tenant") if self._may(request, d)]
        for tenant in {d.tenant_id: d.tenant for d in documents}.values():
            if (refusal := user_budget_refusal(request.user, tenant)) is not None:
                self.message_user(request, refusal, messages.ERROR)
                return
        for document in documents:
            document_reingest(tenant=document.tenant, document=document, force=True)
        self.message_user(
            request, f"Queued {len(documents)} documents for ingestion.", messages.SUCCESS
        )


# -- chunks ----------------------------------------------------------------------------------
CHUNK_FIELDS = [
    "knowledge_base", "document", "ordinal", "heading_path", "page", "token_count",
    "dimensions", "text",
]  # fmt: skip


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin, TenantScopedAdmin):
    """Read-only: chunks are made by ingestion."""

    list_display = ["document", "ordinal", "heading_path", "page", "token_count", "preview"]
    list_filter = ["knowledge_base"]
    list_select_related = ["document"]
    search_fields = ["text", "heading_path"]
    fields = CHUNK_FIELDS
    readonly_fields = CHUNK_FIELDS

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding", "search")

    @admin.display(description="Text")
    def preview(self, obj: Chunk) -> str:
        return obj.text if len(obj.text) <= 120 else obj.text[:117] + "…"
