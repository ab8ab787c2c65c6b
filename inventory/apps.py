from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Fleet inventory"

    def ready(self) -> None:
        from inventory import signals  # noqa: F401 -- connects the receivers
