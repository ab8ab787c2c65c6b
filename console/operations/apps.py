from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "console.operations"
    label = "operations"
    verbose_name = "Host operations"

    def ready(self) -> None:
        from console.operations import alerting  # noqa: F401  (connects the alert hook)
