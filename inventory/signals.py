"""Keep each host's beat entry in step with the host, however the host was saved."""

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from inventory.models import Host
from inventory.schedules import remove_host_schedule, sync_host_schedule


@receiver(post_save, sender=Host)
def host_saved(sender, instance: Host, raw: bool = False, **kwargs) -> None:
    if not raw:
        sync_host_schedule(instance)


@receiver(post_delete, sender=Host)
def host_deleted(sender, instance: Host, **kwargs) -> None:
    remove_host_schedule(instance)
