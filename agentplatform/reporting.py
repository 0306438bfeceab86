"""Error pages and reports never show connection strings or keys, even with DEBUG on."""

from __future__ import annotations

import re

from django.views.debug import SafeExceptionReporterFilter


class SecretHidingReporterFilter(SafeExceptionReporterFilter):
    # Django's default list plus settings that embed credentials in URLs.
    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|DATABASES|CACHES|BROKER|BACKEND",
        flags=re.IGNORECASE,
    )
