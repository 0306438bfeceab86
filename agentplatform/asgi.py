"""ASGI entry point. Later issues route /mcp beside Django here."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
application = get_asgi_application()
