"""The Celery app. Settings come from Django's (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")

app = Celery("agentplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def _refuse_to_start_misconfigured(**kwargs) -> None:
    """Exits (with the reason) before the pool starts, e.g. on other FIELD_ENCRYPTION_KEYS."""
    from agentplatform import startup_checks

    startup_checks.exit_unless_ready()


@signals.worker_init.connect
def _assume_app_role(**kwargs) -> None:
    """A worker process: the tenant policies apply to its queries (before any fork)."""
    from agentplatform.tenancy import rls

    rls.assume_app_role()
