from __future__ import annotations

import re

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views import defaults

from tenancy import rls
from tenancy.access import tenants_for
from tenancy.models import Tenant
from tenancy.selectors import active_tenant_named
from tenancy.sign_in import SignInForm, with_throttle_status
from tenancy.sign_on import sso


class SignInView(auth_views.LoginView):
    """Django's login with attempt limits (tenancy.sign_in): a refused attempt is a 429."""

    authentication_form = SignInForm
    redirect_authenticated_user = True

    def form_invalid(self, form):
        return with_throttle_status(super().form_invalid(form))

    def get_context_data(self, **kwargs):
        """With "Sign in with ..." for the platform's identity providers, and the tenant's
        own when the page names one (`?tenant=<slug>`, or a `next` inside a tenant)."""
        context = super().get_context_data(**kwargs)
        context["sso_providers"] = sso.providers(tenant=self._named_tenant())
        return context

    def _named_tenant(self) -> Tenant | None:
        slug = self.request.GET.get("tenant", "")
        if not slug:
            match = re.match(r"^/t/([a-z0-9-]{1,50})/", self.get_redirect_url() or "")
            slug = match.group(1) if match else ""
        if not slug:
            return None
        with rls.owner():  # before sign-in: looked up by its public slug
            return active_tenant_named(slug=slug)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """One tenant: go there. Several: pick one. None: say so."""
    tenants = list(tenants_for(request.user))
    if len(tenants) == 1:
        return redirect("tenant_home", tenant_slug=tenants[0].slug)
    return render(request, "web/tenant_picker.html", {"tenants": tenants})


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The 403 page: for a session a password began, in a tenant that turned password
    sign-in off, what to do instead (its single sign-on, or leaving it); Django's otherwise."""
    if not isinstance(exception, sso.PasswordSignInOff):
        return defaults.permission_denied(request, exception)
    context = {
        "tenant": exception.tenant,
        "message": str(exception),
        "providers": sso.providers_serving(exception.tenant),
        "next": request.get_full_path(),
    }
    return render(request, "web/password_off.html", context, status=403)
