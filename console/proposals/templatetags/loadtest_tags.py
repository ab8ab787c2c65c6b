"""The combined-load-test panel of the proposal page, with what it needs from the database."""

from django import template

from console.proposals.loadtest.views import StartLoadTestForm, status_of
from console.proposals.models import LoadTest
from console.proposals.transitions import Event, allowed

register = template.Library()


@register.inclusion_tag("proposals/_loadtest_panel.html", takes_context=True)
def loadtest_panel(context, proposal):
    user = context["request"].user
    latest = proposal.load_tests.filter(source_format=LoadTest.Format.MEASURED).first()
    may_run = (
        user.has_perm("proposals.change_proposal")
        and proposal.author_id == user.pk
        and allowed(proposal.state, Event.EDIT)
    )
    return {
        "proposal": proposal,
        "test": latest,
        "status": status_of(latest) if latest else None,
        "may_run": may_run,
        "form": StartLoadTestForm(),
        "csrf_token": context.get("csrf_token"),
    }
