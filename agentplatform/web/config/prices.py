"""Model prices: the built-in table with the tenant's own prices over it; admins add,
change and remove their own (a removed price falls back to the built-in one)."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import (
    PlainLabels,
    admin_required,
    confirm_delete,
    render_form,
    render_page,
    try_save,
)
from providers import selectors
from providers.models import PRICE_KINDS, ModelPrice
from providers.pricing import DEFAULT_PRICES, price_rows
from providers.services import price_delete, price_save

PRICE_FIELDS = ["input_price", "output_price", "cached_input_price", "cache_write_price"]


class PriceForm(PlainLabels, forms.ModelForm):
    class Meta:
        model = ModelPrice
        fields = ["provider_kind", "model", *PRICE_FIELDS]
        labels = {
            "input_price": "Input",
            "output_price": "Output",
            "cached_input_price": "Cached input",
            "cache_write_price": "Cache write",
        }

    def changes(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}


@admin_required
def price_list(request: HttpRequest) -> HttpResponse:
    rows = price_rows(request.tenant.pk)
    labels = dict(PRICE_KINDS)
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(labels.get(row.provider_kind, row.provider_kind), []).append(row)
    return render_page(request, "web/config/price_list.html", {"groups": groups.items()})


@admin_required
def price_create(request: HttpRequest) -> HttpResponse:
    """`?provider_kind=&model=` starts from that built-in entry (to override it)."""
    initial = {}
    kind, model = request.GET.get("provider_kind", ""), request.GET.get("model", "")
    built_in = DEFAULT_PRICES.get(kind, {}).get(model)
    if built_in is not None:
        initial = {
            "provider_kind": kind, "model": model, "input_price": built_in.input,
            "output_price": built_in.output, "cached_input_price": built_in.cached_input,
            "cache_write_price": built_in.cache_write,
        }  # fmt: skip
    return _price_form(request, ModelPrice(tenant=request.tenant), initial)


@admin_required
def price_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _price_form(request, selectors.price_get(tenant=request.tenant, price_id=pk))


def _price_form(request: HttpRequest, price: ModelPrice, initial=None) -> HttpResponse:
    tenant = request.tenant
    existing = price.pk is not None
    form = PriceForm(request.POST or None, instance=price, initial=initial)
    save = lambda: price_save(  # noqa: E731
        tenant=tenant, price=price if existing else None, changes=form.changes()
    )
    if try_save(request, form, save, "price"):
        return redirect("config:prices", tenant_slug=tenant.slug)
    context = {"form": form, "price": price if existing else None}
    return render_form(request, "web/config/price_form.html", context)


@admin_required
def price_remove(request: HttpRequest, pk: int) -> HttpResponse:
    price = selectors.price_get(tenant=request.tenant, price_id=pk)
    return confirm_delete(
        request, price, what="price", cancel="config:prices",
        delete=lambda: price_delete(tenant=request.tenant, price=price),
    )  # fmt: skip
