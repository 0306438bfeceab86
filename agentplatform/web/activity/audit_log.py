"""The tenant's audit log (owners and admins only): newest first, filtered, paginated,
each entry with its before/after values. One URL serves the page or, for htmx, the
results partial. A filter that is not valid answers 400 with the form's errors."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse

from agentplatform.web.config.common import render_page
from tenancy.policy import Action
from tenancy.records.audit_log import AuditFilterForm, audit_entries, diff_rows
from tenancy.resolution import tenant_member_required

PAGE_SIZE = 50


@tenant_member_required(Action.READ_AUDIT)
def audit_log(request: HttpRequest) -> HttpResponse:
    """Two queries per page (count, rows)."""
    form = AuditFilterForm(request.GET or None)
    if request.GET and not form.is_valid():
        context = {"form": form, "page": None, "query": ""}
        return render_page(request, TEMPLATE, context, partial=_partial(request), status=400)
    entries = audit_entries(request.tenant)
    if form.is_bound:
        entries = form.apply(entries)
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    for entry in page.object_list:
        entry.rows = diff_rows(entry)
        entry.detail_items = sorted((entry.details or {}).items())
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    return render_page(request, TEMPLATE, context, partial=_partial(request))


TEMPLATE = "web/activity/audit_log.html"


def _partial(request: HttpRequest) -> str | None:
    return "results" if request.htmx and not request.htmx.boosted else None
