"""ASGI entry point. Later issues route /mcp beside Django here."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
# Under ASGI each request's sync code runs in a thread of its own; a connection kept for
# reuse would stay with a thread that is gone. Connect per request instead.
os.environ.setdefault("DB_CONN_MAX_AGE", "0")
application = get_asgi_application()
