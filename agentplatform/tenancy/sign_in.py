"""Sign-in attempts limited per account name and per client IP, for both login pages
(`/login/` and `/admin/login/` use the forms below); how a session signed in, and the end
of a password session once its user's tenant turns passwords off.

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
from django.contrib import messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import SESSION_KEY, logout, user_logged_in
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied, ValidationError
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from agentplatform import rate_counters
from agentplatform.tenancy.sso import (
    PASSWORD_OFF,
    PASSWORD_SESSION_ENDED,
    tenant_refusing_password,
)

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


class PasswordBackend(ModelBackend):
    """Django's username-and-password check, refusing the right password of a member of a
    tenant that turned password sign-in off (every face signs in through `authenticate`).
    It stops `authenticate` (which then sends `user_login_failed`), and leaves the tenant's
    name on the request for the form's message."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            return None
        tenant = tenant_refusing_password(user)
        if tenant is not None:
            if request is not None:
                request.password_sign_in_off = tenant.name
            raise PermissionDenied(PASSWORD_OFF.format(tenant=tenant.name))
        return user


class SignInLimit:
    """Mixed into an AuthenticationForm: counts the attempt before authenticating."""

    request: HttpRequest | None
    throttled_for: int | None = None  # seconds, when this attempt was refused
    password_off: bool = False  # the password was right, but a tenant turned passwords off

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
        try:
            cleaned = super().clean()  # authenticate(request, ...): user_login_failed on failure
        except ValidationError:
            tenant_name = getattr(self.request, "password_sign_in_off", None)
            if tenant_name is None:
                raise
            self.password_off = True
            raise ValidationError(
                PASSWORD_OFF.format(tenant=tenant_name), code="password_off"
            ) from None
        attempt_succeeded(username=username, ip=ip)
        return cleaned


class SignInForm(SignInLimit, AuthenticationForm):
    pass


class AdminSignInForm(SignInLimit, AdminAuthenticationForm):
    pass


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
PASSWORD_METHOD = "password"  # noqa: S105 (a name, not a password)


@receiver(user_logged_in, dispatch_uid="sign_in.remember_method")
def _remember_sign_in_method(sender, request, user, **kwargs) -> None:
    """Single sign-on names its provider on the user (web/sso/backend.py); every other
    sign-in (the two login pages, `Client.login` in tests) began with a password."""
    session = getattr(request, "session", None)
    if session is None:
        return
    provider = getattr(user, "signed_in_with_provider", None)
    session[SIGN_IN_METHOD] = f"sso:{provider}" if provider else PASSWORD_METHOD


def began_with_password(request: HttpRequest) -> bool:
    """Whether the request's session was signed in with a password. A session from before
    the method was recorded counts as one, unless its user has no usable password (made by
    single sign-on). Reads the session and, for a marked password session, nothing else."""
    method = request.session.get(SIGN_IN_METHOD)
    if method is not None:
        return method == PASSWORD_METHOD
    return request.user.has_usable_password()


class PasswordSessionMiddleware(MiddlewareMixin):
    """Ends a session a password began once a tenant of its user turns password sign-in
    off (`tenant_refusing_password`, which spares superusers): the request goes on signed
    out (a page that needs a user sends them to /login/, where the message says why; the
    API answers as to anyone without credentials). Sessions of single sign-on and API keys
    pass. After AuthenticationMiddleware and MessageMiddleware; one query per request of
    a password session."""

    def process_request(self, request: HttpRequest) -> None:
        if settings.SESSION_COOKIE_NAME not in request.COOKIES:
            return  # no session to end (and none read: no `Vary: Cookie` for it)
        if SESSION_KEY not in request.session or not began_with_password(request):
            return
        user = request.user
        if not user.is_authenticated:
            return
        tenant = tenant_refusing_password(user)
        if tenant is None:
            return
        logout(request)  # the session flushed; request.user is anonymous from here
        messages.warning(request, PASSWORD_SESSION_ENDED.format(tenant=tenant.name))
