"""The Django project and platform layer (named so as not to shadow the stdlib `platform`)."""

from agentplatform.celery import app as celery_app

__all__ = ["celery_app"]
