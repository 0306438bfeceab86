"""A cited knowledge document, readable by the tenant's members (the knowledge pages
themselves are for admins): its title, knowledge base and text, chunk by chunk."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.policy import Action
from agentplatform.tenancy.resolution import tenant_member_required
from rag.models import Document


@tenant_member_required(Action.READ_DATA)
@require_GET
def source(request: HttpRequest, document_id: int) -> HttpResponse:
    document = get_for_tenant(
        Document.objects.select_related("knowledge_base"), request.tenant, pk=document_id
    )
    chunks = document.chunks.order_by("ordinal").only("ordinal", "text", "heading_path", "page")
    return render(request, "web/chat/source.html", {"document": document, "chunks": chunks})
