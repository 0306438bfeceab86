from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from agentplatform.tenancy.access import tenants_for
from agentplatform.tenancy.policy import Action
from agentplatform.tenancy.resolution import tenant_member_required
from agentplatform.tenancy.sign_in import SignInForm, with_throttle_status


class SignInView(auth_views.LoginView):
    """Django's login with attempt limits (tenancy.sign_in): a refused attempt is a 429."""

    authentication_form = SignInForm
    redirect_authenticated_user = True

    def form_invalid(self, form):
        return with_throttle_status(super().form_invalid(form))


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """One tenant: go there. Several: pick one. None: say so."""
    tenants = list(tenants_for(request.user))
    if len(tenants) == 1:
        return redirect("tenant_home", tenant_slug=tenants[0].slug)
    return render(request, "web/tenant_picker.html", {"tenants": tenants})


@tenant_member_required(Action.READ_DATA)
def tenant_home(request: HttpRequest) -> HttpResponse:
    return render(request, "web/tenant_home.html", {"tenants": tenants_for(request.user)})
