"""The search tester: what an agent's knowledge_search would find in one knowledge base."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse

from agentplatform.web.config.common import PlainLabels, render_page
from agents import quotas
from rag import selectors
from rag.models import KnowledgeBase
from rag.runtime.embeddings import EmbeddingError
from rag.search import MAX_TOP_K
from rag.services import search
from tenancy.policy import Action
from tenancy.request_budgets import budget_refusal
from tenancy.resolution import tenant_member_required

SNIPPET_CHARS = 600
MODES = [
    ("hybrid", "Hybrid (vectors and full text)"),
    ("vector", "Vectors only"),
    ("lexical", "Full text only"),
]


class SearchForm(PlainLabels, forms.Form):
    query = forms.CharField(max_length=2000, label="Query")
    top_k = forms.IntegerField(min_value=1, max_value=MAX_TOP_K, initial=5, label="Hits")
    mode = forms.ChoiceField(choices=MODES, initial="hybrid", label="Mode")

    def __init__(self, *args: Any, knowledge_base: KnowledgeBase, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not knowledge_base.embeds:  # full text is all a lexical knowledge base has
            self.fields["mode"].choices = [("lexical", "Full text only")]
            self.fields["mode"].initial = "lexical"


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """The chunk's text without its surrounding blank lines, cut at `limit` characters."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@tenant_member_required(Action.READ_DATA)
def search_tester(request: HttpRequest, slug: str) -> HttpResponse:
    """GET shows the form; a query (GET ?query= or POST) searches and shows the hits (htmx:
    the hits only). Searching may call the embedder (a provider: one network call)."""
    knowledge_base = selectors.knowledge_base_by_slug(tenant=request.tenant, slug=slug)
    data = request.POST if request.method == "POST" else None
    if data is None and "query" in request.GET:
        data = request.GET
    form = SearchForm(data, knowledge_base=knowledge_base)
    hits = None
    refusal_status = 400
    searching = data is not None and form.is_valid()
    if searching and (refusal := budget_refusal(request.principal)) is not None:
        form.add_error(None, refusal)
        refusal_status = 429
    elif searching:
        try:
            hits = search(
                tenant=request.tenant,
                knowledge_base_ids=[knowledge_base.pk],
                query=form.cleaned_data["query"],
                top_k=form.cleaned_data["top_k"],
                mode=form.cleaned_data["mode"],
                meter=quotas.Meter.for_initiator(request.tenant.pk, request.user),
            )
        except (ValidationError, EmbeddingError) as error:
            form.add_error(None, str(error) if isinstance(error, EmbeddingError) else error)
    shown = None if hits is None else [{"hit": hit, "snippet": snippet(hit.text)} for hit in hits]
    context = {"knowledge_base": knowledge_base, "form": form, "hits": shown}
    # htmx swaps only 2xx answers: the hits' place shows the refusal, a page is a 4xx.
    status = refusal_status if form.errors and not request.htmx else 200
    return render_page(request, "web/knowledge/search.html", context, partial="hits", status=status)
