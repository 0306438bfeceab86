"""A cited knowledge document, readable by the tenant's members (the knowledge pages
themselves are for admins): its title, knowledge base and text, chunk by chunk."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from rag import selectors
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required


@tenant_member_required(Action.READ_DATA)
@require_GET
def source(request: HttpRequest, document_id: int) -> HttpResponse:
    document = selectors.document_cited(tenant=request.tenant, document_id=document_id)
    chunks = selectors.document_chunks(document=document)
    return render(request, "web/chat/source.html", {"document": document, "chunks": chunks})
