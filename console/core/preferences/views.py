"""The profile page (the user's time zone) and the browser's first-login guess of it."""

from zoneinfo import available_timezones

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from console.core.preferences.models import Preference
from console.core.preferences.services import do_set_time_zone


class TimeZoneForm(forms.Form):
    time_zone = forms.ChoiceField(
        label=_("Time zone"),
        help_text=_("Every time in the console is shown in it, with the zone named."),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [(name, name) for name in sorted(available_timezones())]


def profile(request):
    preference = Preference.objects.filter(user=request.user).first()
    form = TimeZoneForm(
        request.POST or None,
        initial={
            "time_zone": preference.time_zone
            if preference
            else timezone.get_default_timezone_name()
        },
    )
    if request.method == "POST" and form.is_valid():
        do_set_time_zone(
            acting_user=request.user,
            time_zone=form.cleaned_data["time_zone"],
            source=Preference.Source.CHOSEN,
        )
        messages.success(
            request, _("Times now show in %(zone)s.") % {"zone": form.cleaned_data["time_zone"]}
        )
        return redirect("profile")
    return render(
        request,
        "registration/profile.html",
        {"form": form, "preference": preference, "now": timezone.now()},
    )


@require_POST
def browser_time_zone(request):
    """The zone the browser reports, taken once: at the first login, before any choice."""
    try:
        saved = do_set_time_zone(
            acting_user=request.user,
            time_zone=request.POST.get("time_zone", "")[:64],
            source=Preference.Source.BROWSER,
        )
    except ValidationError as error:
        return JsonResponse({"error": " ".join(error.messages)}, status=400)
    return JsonResponse({"time_zone": saved.time_zone if saved else None, "changed": bool(saved)})
