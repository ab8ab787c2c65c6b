from collections import Counter

from django import template

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
        f"{count} × {product} ({bytes_iec(memory)} each)"
        for (product, memory), count in sorted(groups.items())
    )
