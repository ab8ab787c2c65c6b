from django.apps import AppConfig


class ProposalsConfig(AppConfig):
    name = "console.proposals"
    label = "proposals"
    verbose_name = "Placement proposals"
