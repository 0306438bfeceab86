from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from django.core.signals import request_finished, request_started
        from django.db.models.signals import post_migrate

        from tenancy import api_keys, rls, sign_in  # noqa: F401 (they connect signal receivers)
        from tenancy.records import audit_receivers  # noqa: F401

        request_started.connect(rls.clear_request, dispatch_uid="rls.clear_request")
        # And after it: a request's tenants never reach later work of the same thread.
        request_finished.connect(rls.clear_request, dispatch_uid="rls.clear_request_finished")
        post_migrate.connect(_keep_the_app_login, sender=self, dispatch_uid="app_login")


def _keep_the_app_login(sender, using, plan=None, **kwargs) -> None:
    """After every migrate (not a test's flush, which sends no plan): the processes' login
    made or brought up to date (tenancy/app_login.py)."""
    from django.conf import settings
    from django.db import connections

    from tenancy import app_login

    if plan is not None and settings.DB_ROW_LEVEL_SECURITY:
        app_login.ensure(connections[using])
