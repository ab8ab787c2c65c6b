from django.apps import AppConfig


class ProposalsConfig(AppConfig):
    name = "console.proposals"
    label = "proposals"
    verbose_name = "Placement proposals"

    def ready(self) -> None:
        # Answers inventory.demo_history's signals: the demo's switch and open proposals.
        from console.proposals import demo  # noqa: F401
