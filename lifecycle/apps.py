from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "lifecycle"

    def ready(self) -> None:
        # The configuration document's `retention` section (lifecycle.retention_settings).
        from agents.config_document import DocSetting, register_document_setting
        from lifecycle.retention_settings import retention_document_entry, retention_set

        register_document_setting(
            DocSetting(
                "retention",
                read=lambda tenant: retention_document_entry(tenant=tenant),
                write=retention_set,
            )
        )
