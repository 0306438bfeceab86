from django.apps import AppConfig


class ScopingConfig(AppConfig):
    name = "tests.scoping"
    label = "scoping"
