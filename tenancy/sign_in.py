"""Sign-in attempts limited per account name and per client IP, for both login pages
(`/login/` and `/admin/login/` use the forms below), and how a session signed in: a
session a password began acts only in tenants that allow passwords (docs/sso.md).

Every attempt is counted before the password is checked (atomically, in Redis), so
parallel guesses cannot slip past the limit; a successful sign-in takes its attempt
back from the IP's count and clears the account name's. The refusal is the same whether
or not the account exists, and it stands even with the right password until the window
closes. Django's `user_login_failed` (sent by `authenticate`, and here for a refused
attempt, with `throttled=True`) and `user_logged_in` carry the request for an audit log.
"""

from __future__ import annotations

import hashlib
import math

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import user_logged_in
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ValidationError
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from base import rate_counters
from tenancy.access import administered_tenant_refusing_password
from tenancy.sign_on.sso import PASSWORD_METHOD, PASSWORD_OFF, needs_password_sign_in

TOO_MANY = "Too many failed sign-ins; try again in {minutes} minutes."


def _user_key(username: str) -> str:
    # Hashed: any text may be typed as a username; keys stay short and printable.
    digest = hashlib.sha256(username.strip().casefold().encode()).hexdigest()[:32]
    return f"sign-in:user:{digest}"


def _ip_key(ip: str) -> str:
    return f"sign-in:ip:{ip}"


def client_ip(request: HttpRequest | None) -> str:
    """REMOTE_ADDR: behind a proxy, that proxy must set it to the client's address."""
    return (request.META.get("REMOTE_ADDR") if request else None) or "unknown"


def attempt_start(*, username: str, ip: str) -> int | None:
    """Count an attempt; the seconds to wait if it is over a limit (then refuse it
    without checking the password). Two Redis round trips."""
    window = settings.SIGN_IN_WINDOW_S
    counts = [
        (rate_counters.hit(_user_key(username), window), settings.SIGN_IN_FAILURES_PER_USER),
        (rate_counters.hit(_ip_key(ip), window), settings.SIGN_IN_FAILURES_PER_IP),
    ]
    waits = [count.retry_after_s for count, limit in counts if count.value > limit]
    return max(waits) if waits else None


def attempt_succeeded(*, username: str, ip: str) -> None:
    rate_counters.reset(_user_key(username))
    rate_counters.unhit(_ip_key(ip))


class SignInLimit:
    """Mixed into an AuthenticationForm: counts the attempt before authenticating."""

    request: HttpRequest | None
    throttled_for: int | None = None  # seconds, when this attempt was refused

    def clean(self) -> dict:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if not (username and password):
            return self.cleaned_data  # the fields' own "required" errors stand
        ip = client_ip(self.request)
        wait = attempt_start(username=username, ip=ip)
        if wait is not None:
            self.throttled_for = wait
            user_login_failed.send(
                sender=__name__,
                credentials={"username": username},
                request=self.request,
                throttled=True,
            )
            raise ValidationError(TOO_MANY.format(minutes=math.ceil(wait / 60)), code="throttled")
        cleaned = super().clean()  # authenticate(request, ...): user_login_failed on failure
        attempt_succeeded(username=username, ip=ip)
        return cleaned


class SignInForm(SignInLimit, AuthenticationForm):
    pass


class AdminSignInForm(SignInLimit, AdminAuthenticationForm):
    def confirm_login_allowed(self, user) -> None:
        """A password opens the admin only where a tenant the user administers allows
        passwords: said here, rather than after a sign-in that shows no tenant."""
        super().confirm_login_allowed(user)
        if needs_password_sign_in(user=user, method=PASSWORD_METHOD):
            tenant = administered_tenant_refusing_password(user)
            if tenant is not None:
                raise ValidationError(PASSWORD_OFF.format(tenant=tenant.name), code="password_off")


def with_throttle_status(response: HttpResponse) -> HttpResponse:
    """A login page's response for a refused attempt: 429 with Retry-After."""
    form = (getattr(response, "context_data", None) or {}).get("form")
    wait = getattr(form, "throttled_for", None)
    if wait is not None:
        response.status_code = 429
        response["Retry-After"] = str(wait)
    return response


# -- how a session signed in ---------------------------------------------------------------
SIGN_IN_METHOD = "sign_in_method"  # session: "password", or "sso:<provider slug>"


@receiver(user_logged_in, dispatch_uid="sign_in.remember_method")
def _remember_sign_in_method(sender, request, user, **kwargs) -> None:
    """Single sign-on names its provider on the user (web/sso/backend.py); every other
    sign-in (the two login pages, `Client.login` in tests) began with a password."""
    session = getattr(request, "session", None)
    if session is None:
        return
    provider = getattr(user, "signed_in_with_provider", None)
    session[SIGN_IN_METHOD] = f"sso:{provider}" if provider else PASSWORD_METHOD


def session_sign_in_method(request: HttpRequest) -> str:
    """How the request's session signed in ("" when not recorded, or no session)."""
    session = getattr(request, "session", None)
    return (session.get(SIGN_IN_METHOD) if session is not None else None) or ""


def session_needs_password_sign_in(request: HttpRequest) -> bool:
    """Whether the request's signed-in session may act only in tenants that allow password
    sign-in (`sso.needs_password_sign_in`); never an API key's request. Reads the session; no
    query."""
    user = request.user
    if not isinstance(user, AbstractBaseUser) or not user.is_authenticated:
        return False
    return needs_password_sign_in(user=user, method=session_sign_in_method(request))
