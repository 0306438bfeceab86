import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
application = get_wsgi_application()

from agentplatform.tenancy import rls  # noqa: E402 (after setup)

rls.assume_app_role()  # a web process: the tenant policies apply to its queries
