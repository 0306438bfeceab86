from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "providers"

    def ready(self) -> None:
        from providers import pricing  # noqa: F401 (its signal receivers)
        from providers.models import ProviderConnection
        from providers.services import connection_save
        from tenancy.records import history

        # Versioned without its key (docs/config-history.md); a restore keeps today's key.
        history.register(
            ProviderConnection,
            name="provider-connections",
            noun="provider connection",
            restore=lambda tenant, obj, changes: connection_save(
                tenant=tenant, connection=obj, changes=changes
            ),
        )
