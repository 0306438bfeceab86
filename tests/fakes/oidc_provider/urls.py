"""The provider's routes: django-oauth-toolkit under /o/, a login form, the test knob."""

from __future__ import annotations

import json

from django.contrib.auth import authenticate, get_user_model, login
from django.contrib.auth.models import Group
from django.http import HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import include, path
from django.utils.html import escape
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.csrf import csrf_exempt

FORM = """<!doctype html><title>Fake IdP</title><form method="post">
<input name="username"><input name="password" type="password">
<input type="hidden" name="next" value="{next}"><button>Sign in</button></form>{error}"""


@csrf_exempt  # a test fake on loopback
def sign_in(request):
    next_url = request.POST.get("next") or request.GET.get("next") or "/"
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = "/"
    error = ""
    if request.method == "POST":
        user = authenticate(
            request, username=request.POST.get("username"), password=request.POST.get("password")
        )
        if user is not None:
            login(request, user)
            return HttpResponseRedirect(next_url)
        error = "<p>wrong</p>"
    return HttpResponse(FORM.format(next=escape(next_url), error=error))


@csrf_exempt
def test_users(request):
    """POST {"username", "password", "email", "groups": [...], "knob": ""}: create or update."""
    data = json.loads(request.body)
    User = get_user_model()
    user, _ = User.objects.get_or_create(username=data["username"])
    user.set_password(data["password"])
    user.email = data.get("email", "")
    user.first_name = data.get("knob", "")
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in data.get("groups", [])])
    return JsonResponse({"id": user.pk})


urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", sign_in),
    path("test/users", test_users),
]
