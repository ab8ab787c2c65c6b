"""CSV downloads: streamed, times as ISO 8601 with the offset of the reader's time zone, and
cells that a spreadsheet would run as a formula made inert."""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterable, Sequence

from django.http import StreamingHttpResponse
from django.utils import timezone

# A cell starting with one of these is a formula to Excel and LibreOffice (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value, zone: dt.tzinfo) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.astimezone(zone).isoformat(timespec="seconds")
    text = str(value)
    return f"'{text}" if text.startswith(_FORMULA_START) else text


def csv_response(
    stem: str, header: Sequence[str], rows: Iterable[Sequence]
) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    # The rows stream after the view returns, once the reader's zone is no longer active.
    zone = timezone.get_current_timezone()

    def lines():
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([_cell(value, zone) for value in row])

    filename = f"{stem}-{timezone.localdate():%Y-%m-%d}.csv"
    return StreamingHttpResponse(
        lines(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
