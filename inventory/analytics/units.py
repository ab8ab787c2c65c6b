"""Units and conventions shared by the capacity analytics.

Conventions, everywhere in ``inventory.analytics``:

- memory is in **bytes** (``int`` where it is a quantity of memory, ``float`` only for rates
  such as bytes per token or for statistics such as a P95 of a series);
- time is **epoch seconds** (``float``, UTC). Callers holding aware datetimes pass
  ``dt.timestamp()``; plain numbers keep the analytics free of timezone handling;
- fractions are in ``[0, 1]``; percentiles are written ``pct`` in ``[0, 100]`` except for
  histogram quantiles, which follow Prometheus and take ``q`` in ``[0, 1]``.
"""

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def format_gib(num_bytes: float) -> str:
    """Bytes as GiB with one decimal, the precision the explanations are read at.

    A small non-zero amount keeps two significant digits rather than reading as 0.0 GiB.
    """
    gib = num_bytes / GiB
    if gib != 0 and round(gib, 1) == 0:
        return f"{gib:.2g} GiB"
    return f"{gib:.1f} GiB"


def format_ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"
