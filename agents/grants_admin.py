"""Use grants in the Django admin: an agent's or crew's "Who may use it" page, the same
grants (and the same service, `agents.services.use_grant`) as the web configuration
pages. Tenant admins change the grants of their tenants' agents and crews only."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html

from agents.selectors import use_grants
from agents.services import use_grant
from tenancy.models import Membership, TenantGroup


class GrantForm(forms.Form):
    action = forms.ChoiceField(choices=[("grant", "Grant"), ("revoke", "Revoke")])
    member = forms.ModelChoiceField(queryset=Membership.objects.none(), required=False)
    group = forms.ModelChoiceField(queryset=TenantGroup.objects.none(), required=False)

    def __init__(self, *args, tenant, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        members = Membership.objects.filter(tenant=tenant).select_related("user")
        self.fields["member"].queryset = members
        self.fields["member"].label_from_instance = lambda m: m.user.get_username()
        self.fields["group"].queryset = TenantGroup.objects.filter(tenant=tenant)

    def clean(self):
        cleaned = super().clean()
        if bool(cleaned.get("member")) == bool(cleaned.get("group")):
            raise ValidationError("Choose one member or one group.")
        return cleaned


class UseGrantsAdmin:
    """For the Agent and Crew admins: an `access` view and a link to it in the list."""

    @property
    def grants_url_name(self) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_access"

    def grants_link(self, obj) -> str:
        url = reverse(f"admin:{self.grants_url_name}", args=[obj.pk])
        return format_html('<a href="{}">Who may use it</a>', url)

    grants_link.short_description = ""

    def get_urls(self):
        view = self.admin_site.admin_view(self.grants_view)
        return [path("<int:pk>/access/", view, name=self.grants_url_name), *super().get_urls()]

    def grants_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        target = self.get_object(request, str(pk))
        if target is None or not self.has_change_permission(request, target):
            raise Http404("No such agent or crew.")
        form = GrantForm(request.POST or None, tenant=target.tenant)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            member = data.get("member")
            try:
                use_grant(
                    tenant=target.tenant,
                    target=target,
                    granted=data["action"] == "grant",
                    user=member.user if member else None,
                    group=data.get("group"),
                )
            except ValidationError as exc:
                form.add_error(None, exc.messages)
            else:
                messages.success(request, "Granted." if data["action"] == "grant" else "Revoked.")
                return HttpResponseRedirect(request.path)
        users, groups = use_grants(tenant=target.tenant, target=target)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Who may use {target}",
            "opts": self.opts,
            "original": target,
            "users": users,
            "groups": groups,
            "form": form,
        }
        return render(request, "admin/agents/grants.html", context)
