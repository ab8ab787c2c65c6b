from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        # Makes the console's Celery app current, so shared tasks sent from web and command
        # processes go to its broker. Here rather than in console/__init__.py: host agents
        # import console.env and console.broker, and must not set DJANGO_SETTINGS_MODULE,
        # which makes Celery load Django and the whole console on a GPU host.
        # console.checks registers the system checks of settings that only fail together.
        from console import celery, checks  # noqa: F401
        from console.audit import tokens

        tokens.connect()
