from django.apps import AppConfig


class HubConfig(AppConfig):
    name = "hub"
    verbose_name = "Registry"

    def ready(self) -> None:
        from hub.api.fields import strict_strings

        # First, before any serializer is defined: string fields take strings, kept as sent.
        strict_strings()
        from hub.api import schema_extensions  # noqa: F401  (registers the OpenAPI auth schemes)
