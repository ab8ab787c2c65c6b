from django.apps import AppConfig


class RunbooksConfig(AppConfig):
    name = "runbooks"
    verbose_name = "Runbooks"
