from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "agentplatform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from agentplatform.tenancy import (  # noqa: F401 (they connect signal receivers)
            api_keys,
            audit_receivers,
        )
