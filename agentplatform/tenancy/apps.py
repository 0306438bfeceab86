from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "agentplatform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from django.core.signals import request_finished, request_started

        from agentplatform.tenancy import (  # noqa: F401 (they connect signal receivers)
            api_keys,
            audit_receivers,
            rls,
            sign_in,
        )

        request_started.connect(rls.clear_request, dispatch_uid="rls.clear_request")
        # And after it: a request's tenants never reach later work of the same thread.
        request_finished.connect(rls.clear_request, dispatch_uid="rls.clear_request_finished")
