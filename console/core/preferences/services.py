"""Setting a user's time zone: one audited change, from the profile page or the browser."""

from console.core.auditing import Action, snapshot
from console.core.auditing.changes import atomic_change, record
from console.core.preferences.models import Preference, validate_time_zone


@atomic_change
def do_set_time_zone(*, acting_user, time_zone: str, source: str) -> Preference | None:
    """The browser's guess never overrides a zone already set; a choice always does.
    None when nothing changed."""
    validate_time_zone(time_zone)
    current = Preference.objects.select_for_update().filter(user=acting_user).first()
    if current is not None and source == Preference.Source.BROWSER:
        return None
    if current is not None and current.time_zone == time_zone:
        return None
    before = snapshot(current) if current else None
    preference = current or Preference(user=acting_user)
    preference.time_zone, preference.time_zone_source = time_zone, source
    preference.full_clean()
    preference.save()
    record(actor=acting_user, action=Action.PREFERENCE_TIME_ZONE, obj=preference,
           before=before, after=snapshot(preference))  # fmt: skip
    return preference
