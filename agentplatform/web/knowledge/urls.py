"""Knowledge bases under /t/<tenant_slug>/knowledge/, for owners and admins only (see
docs/web-knowledge.md). Every knowledge-base URL has a suffix after its slug, so no slug
can shadow new/."""

from __future__ import annotations

from django.urls import path

from agentplatform.web.knowledge import documents, knowledge_bases, search

app_name = "knowledge"
urlpatterns = [
    path("", knowledge_bases.knowledge_base_list, name="index"),
    path("new/", knowledge_bases.knowledge_base_create, name="create"),
    path("<slug:slug>/edit/", knowledge_bases.knowledge_base_edit, name="edit"),
    path("<slug:slug>/delete/", knowledge_bases.knowledge_base_remove, name="delete"),
    path("<slug:slug>/documents/", documents.document_list, name="documents"),
    path("<slug:slug>/documents/add/", documents.document_create, name="document_add"),
    path(
        "<slug:slug>/documents/<int:pk>/reingest/",
        documents.document_reingest_view,
        name="document_reingest",
    ),
    path(
        "<slug:slug>/documents/<int:pk>/delete/",
        documents.document_remove,
        name="document_delete",
    ),
    path("<slug:slug>/search/", search.search_tester, name="search"),
]
