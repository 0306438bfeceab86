from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "agentplatform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from django.core.signals import request_started

        from agentplatform.tenancy import (  # noqa: F401 (they connect signal receivers)
            api_keys,
            audit_receivers,
            rls,
        )

        request_started.connect(rls.clear_request, dispatch_uid="rls.clear_request")
