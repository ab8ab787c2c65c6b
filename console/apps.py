from django.apps import AppConfig


class ProjectConfig(AppConfig):
    """The project itself: its Celery app and its system checks, nothing with models."""

    name = "console"
    label = "project"
    verbose_name = "Project"

    def ready(self) -> None:
        # Makes the console's Celery app current, so shared tasks sent from web and command
        # processes go to its broker. console.checks registers the system checks of settings
        # that only fail together.
        from console import celery, checks  # noqa: F401
