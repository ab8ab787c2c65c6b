import datetime as dt
from collections import Counter

from django import template
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.core.roles import LABELS

register = template.Library()

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@register.filter
def bytes_iec(value) -> str:
    """1.5 GiB, 80.0 GiB: memory as nvidia-smi users read it (powers of 1024)."""
    if value is None or value == "":
        return "—"
    size = float(value)
    unit = 0
    while abs(size) >= 1024 and unit < len(_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{size:.0f} {_UNITS[unit]}" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


@register.filter
def card_summary(gpus) -> str:
    """'8 × NVIDIA H100 80GB HBM3 (79.6 GiB each)': per-card size, never a sum across cards."""
    groups = Counter((gpu.product_name, gpu.memory_total_bytes) for gpu in gpus)
    return ", ".join(
        _("%(count)s × %(product)s (%(memory)s each)")
        % {"count": count, "product": product, "memory": bytes_iec(memory)}
        for (product, memory), count in sorted(groups.items())
    )


# Colour-blind-safe palette (Okabe-Ito, then Paul Tol's muted): a model keeps its colour
# across every diagram, because the colour comes from its name.
_PALETTE = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
    "#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#AA4499",
)  # fmt: skip


@register.filter
def model_color(label: str) -> str:
    name = label.split(" (")[0].split(",")[0].split(" #")[0]
    return _PALETTE[sum(map(ord, name)) % len(_PALETTE)]


@register.filter
def mib(value) -> str:
    return bytes_iec((value or 0) * 1024 * 1024)


@register.filter
def iso_datetime(value) -> dt.datetime | None:
    """A time stored as an ISO 8601 string with its offset (inside a JSON field) back as a
    datetime, so that the date filter shows it in the reader's zone like any other time. None
    for what does not read as one (a row written before times kept their date and offset):
    templates then show the stored text as it is."""
    try:
        return dt.datetime.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        return None


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if mapping else None


@register.filter
def percent(fraction) -> str:
    """0.004 -> '0.4%': small shares must not read as zero."""
    if fraction is None:
        return "—"
    value = 100 * float(fraction)
    return f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


@register.filter
def role_label(role: str) -> str:
    return str(LABELS.get(role, role))


# Status words computed by the pages (red/amber/green, gate verdicts, interference verdicts):
# the value stays the CSS class, the label is translated.
STATUS_LABELS = {
    "green": gettext_lazy("green"),
    "amber": gettext_lazy("amber"),
    "red": gettext_lazy("red"),
    "unknown": gettext_lazy("unknown"),
    "pass": gettext_lazy("pass"),
    "fail": gettext_lazy("fail"),
    "warn": gettext_lazy("warn"),
    "n/a": gettext_lazy("n/a"),
    "error": gettext_lazy("error"),
    "pending": gettext_lazy("pending"),
    "tail_rises": gettext_lazy("tail rises"),
    "no_effect": gettext_lazy("no effect"),
    "insufficient_data": gettext_lazy("insufficient data"),
}


@register.filter
def status_label(status) -> str:
    return str(STATUS_LABELS.get(status, status))


# The gates' titles, by gate code (console.proposals.gates.Gate); the stored title is the
# fallback for a gate this list does not know yet.
GATE_TITLES = {
    "memory": gettext_lazy("Memory ledger, per card"),
    "kv": gettext_lazy("KV reservation"),
    "isolation": gettext_lazy("Isolation"),
    "load_test": gettext_lazy("Combined load test"),
    "engine_settings": gettext_lazy("Engine memory settings"),
}


@register.filter
def gate_title(gate, stored_title="") -> str:
    return str(GATE_TITLES.get(gate, stored_title or gate))
