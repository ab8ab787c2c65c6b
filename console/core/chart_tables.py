"""The text table of a chart whose figure is built on the server: the shape that
static/js/charts.js gives the tables of the charts it draws (a <details> right after the
chart), rendered by templates/console/chart_table.html. The figure function builds the table
from the same figures as its traces."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def chart_table(
    table_id: str, caption: str, columns: Sequence[tuple[str, bool]], rows: Iterable[Sequence]
) -> dict:
    """columns: (label, numeric) each; rows: one cell per column, as the table prints it."""
    return {
        "id": table_id,
        "caption": caption,
        "columns": [{"label": label, "numeric": numeric} for label, numeric in columns],
        "rows": [
            [
                {"text": cell, "numeric": numeric}
                for cell, (_, numeric) in zip(row, columns, strict=True)
            ]
            for row in rows
        ],
    }
