"""Settings of the fake identity provider (environment: OIDC_FAKE_DB, OIDC_FAKE_ISSUER,
OIDC_FAKE_KEY: a PEM RSA private key made at start, OIDC_FAKE_REDIRECT_URIS)."""

from __future__ import annotations

import os

SECRET_KEY = "fake-oidc-provider-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.fakes.oidc_provider.urls"
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["OIDC_FAKE_DB"]}
}
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# Cookies ignore ports: on 127.0.0.1 beside the platform, "sessionid" would overwrite its own.
SESSION_COOKIE_NAME = "fake_idp_session"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; a fake
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["OIDC_FAKE_KEY"],
    "OIDC_ISS_ENDPOINT": os.environ["OIDC_FAKE_ISSUER"],
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.fakes.oidc_provider.validator.Validator",
    "SCOPES": {"openid": "OpenID Connect", "email": "E-mail", "profile": "Profile"},
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
}
