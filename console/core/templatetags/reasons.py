from django import template

from console.core.reason_text import render_here

register = template.Library()


@register.filter
def render_reason(reason) -> str:
    """``{{ event.cause_reason|render_reason }}``: a stored code and parameters, or old text."""
    return render_here(reason)
