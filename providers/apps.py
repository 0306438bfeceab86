from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "providers"

    def ready(self) -> None:
        from providers import pricing  # noqa: F401 (its signal receivers)
