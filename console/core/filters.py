"""Filter fields every app's lists share."""

import datetime as dt

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

# PostgreSQL keeps offsets within ±15:59; Python parses up to ±23:59. Moments are taken in UTC
# and within the years any record of the console can carry.
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)


class _MomentField(forms.DateTimeField):
    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        if moment.tzinfo is None:  # the form's time zone was applied to a naive value already
            moment = moment.replace(tzinfo=dt.UTC)
        moment = moment.astimezone(dt.UTC)
        if not EARLIEST <= moment < LATEST:
            raise forms.ValidationError(_("Give a moment between 2000 and 2100."), code="range")
        return moment


class MomentFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 moment, compared in UTC."""

    field_class = _MomentField
