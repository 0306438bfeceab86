from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "agentplatform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from agentplatform.tenancy import api_keys  # noqa: F401 (connects its signal receivers)
