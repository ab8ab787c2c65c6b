"""The red/amber/green thresholds, from settings."""

from django.conf import settings

from inventory.analytics.fragmentation import Thresholds


def fragmentation_thresholds() -> Thresholds:
    return Thresholds(settings.FRAGMENTATION_AMBER, settings.FRAGMENTATION_RED)


def usage_thresholds() -> Thresholds:
    return Thresholds(settings.USAGE_AMBER, settings.USAGE_RED)
