from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "agentplatform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"
