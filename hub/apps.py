from django.apps import AppConfig


class HubConfig(AppConfig):
    name = "hub"
    verbose_name = "Registry"

    def ready(self) -> None:
        from hub.api import schema_extensions  # noqa: F401  (registers the OpenAPI auth schemes)
