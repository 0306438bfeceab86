"""The Celery app. Settings come from Django's (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")

app = Celery("agentplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
