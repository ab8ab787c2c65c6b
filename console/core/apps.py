from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app shares; its models (the audit trail, preferences) keep the label they
    were created under, so their tables and migrations stay."""

    name = "console.core"
    label = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        # Each app's `reasons` module imports its modules that declare reason codes.
        autodiscover_modules("reasons")
