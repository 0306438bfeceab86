import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
application = get_wsgi_application()

from agentplatform import startup_checks  # noqa: E402 (after setup)
from tenancy import rls  # noqa: E402

rls.assume_app_role()  # a web process logs in as the app role: the tenant policies bind it
startup_checks.exit_unless_ready()  # e.g. other FIELD_ENCRYPTION_KEYS than the stored secrets'
