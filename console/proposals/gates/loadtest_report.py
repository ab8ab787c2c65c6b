"""Reading combined load-test results (pure: no Django).

Two formats:

- vLLM's benchmark JSON, as ``vllm bench serve --save-result`` (formerly
  ``benchmarks/benchmark_serving.py --save-result``) writes it: one file per model, so a
  combined test is several files run at once. Read: ``model_id``, ``completed``, ``failed``
  (newer versions), ``duration`` (s), ``date`` (``%Y%m%d-%H%M%S``, written when the run ended,
  in the client's local time), ``request_rate`` (a number or ``"inf"``), ``request_throughput``,
  ``p99_e2el_ms`` (present when ``--percentile-metrics`` includes ``e2el``) and
  ``p99_ttft_ms``. The benchmark knows nothing of GPU memory: card peaks come beside it, one
  ``card,peak_gib`` line per card.
- A CSV with a header ``model,card,p99_latency_ms,card_peak_gib`` (``card_peak_mib`` or
  ``card_peak_bytes`` instead of GiB; an optional ``request_rate`` column): one row per model
  and card. A model's P99 is the highest of its rows, a card's peak the highest of its rows.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from dataclasses import asdict, dataclass, field

GIB = 1024**3
MIB = 1024**2
_PEAK_COLUMNS = {"card_peak_gib": GIB, "card_peak_mib": MIB, "card_peak_bytes": 1}
_CSV_REQUIRED = ("model", "card", "p99_latency_ms")
MAX_NUMBER = 2**53
# A benchmark run longer than this is not a load test of one placement.
MAX_DURATION_S = 7 * 86400


class LoadTestFormatError(ValueError):
    """A file that is not what it claims to be; the message names the file and the field."""


@dataclass(frozen=True)
class ModelRun:
    model: str
    source: str  # the file it came from
    p99_latency_ms: float | None  # end to end, what the SLO is about
    p99_ttft_ms: float | None = None
    request_rate: float | None = None  # offered requests/s; None: all at once ("inf")
    throughput_rps: float | None = None  # completed requests/s
    completed: int | None = None
    failed: int | None = None
    started_at: str = ""  # ISO 8601, naive: the benchmark client's local time
    ended_at: str = ""
    duration_s: float | None = None

    @property
    def rate(self) -> float | None:
        """The traffic this model got in the test: offered rate, else completed rate."""
        return self.request_rate if self.request_rate is not None else self.throughput_rps


@dataclass(frozen=True)
class LoadTestRun:
    source_format: str  # "vllm-json" or "csv"
    models: tuple[ModelRun, ...]
    card_peaks: dict[str, int] = field(default_factory=dict)  # card -> peak bytes

    def to_json(self) -> dict:
        return asdict(self) | {"models": [asdict(m) for m in self.models]}

    @classmethod
    def from_json(cls, data: dict) -> LoadTestRun:
        return cls(
            source_format=data["source_format"],
            models=tuple(ModelRun(**model) for model in data["models"]),
            card_peaks={card: int(peak) for card, peak in data.get("card_peaks", {}).items()},
        )


def _number(name: str, data: dict, key: str, *, required: bool = False) -> float | None:
    value = data.get(key)
    if value is None:
        if required:
            raise LoadTestFormatError(f"{name}: no {key!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LoadTestFormatError(f"{name}: {key!r} is {_shown(value)}, not a number")
    # abs() first: math.isfinite() of a 4,000-digit integer raises OverflowError.
    if not abs(value) <= MAX_NUMBER:
        raise LoadTestFormatError(
            f"{name}: {key!r} is {_shown(value)}, not a finite number within ±2^53"
        )
    return float(value)


def _shown(value: object) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
    return text if len(text) <= 60 else f"{text[:60]}…"


def _no_nul(name: str, where: str, text: str) -> None:
    # PostgreSQL's jsonb, where the parsed run is kept, cannot hold NUL.
    if "\x00" in text:
        raise LoadTestFormatError(f"{name} {where}: NUL characters are not allowed")


def parse_vllm_result(name: str, content: bytes | str) -> ModelRun:
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError) as error:
        # json's own message says where: "Expecting value: line 3 column 7 (char 31)".
        raise LoadTestFormatError(f"{name}: not JSON ({error})") from None
    except RecursionError:
        raise LoadTestFormatError(f"{name}: not a vLLM result (nested too deep)") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_id"), str):
        raise LoadTestFormatError(
            f"{name}: no 'model_id': not a result saved by vllm bench serve --save-result"
        )
    _no_nul(name, "model_id", data["model_id"])
    completed = _number(name, data, "completed", required=True)
    duration = _number(name, data, "duration")
    if duration is not None and not 0 <= duration <= MAX_DURATION_S:
        raise LoadTestFormatError(
            f"{name}: 'duration' is {duration:g} s, not from 0 to {MAX_DURATION_S} s"
        )
    rate = data.get("request_rate")
    ended = started = ""
    if isinstance(data.get("date"), str):
        try:
            end = dt.datetime.strptime(data["date"], "%Y%m%d-%H%M%S")
        except ValueError:
            raise LoadTestFormatError(
                f"{name}: 'date' is {data['date']!r}, not YYYYmmdd-HHMMSS"
            ) from None
        ended = end.isoformat()
        if duration is not None:
            try:
                started = (end - dt.timedelta(seconds=duration)).isoformat(timespec="seconds")
            except OverflowError:
                raise LoadTestFormatError(
                    f"{name}: 'date' minus 'duration' is before the year 1"
                ) from None
    failed = _number(name, data, "failed")
    return ModelRun(
        model=data["model_id"],
        source=name,
        p99_latency_ms=_number(name, data, "p99_e2el_ms"),
        p99_ttft_ms=_number(name, data, "p99_ttft_ms"),
        request_rate=None if rate == "inf" else _number(name, data, "request_rate"),
        throughput_rps=_number(name, data, "request_throughput"),
        completed=int(completed),
        failed=None if failed is None else int(failed),
        started_at=started,
        ended_at=ended,
        duration_s=duration,
    )


def _float_cell(name: str, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LoadTestFormatError(
            f"{name} line {line}: {column} {text!r} is not a number"
        ) from None
    if not 0 <= value <= MAX_NUMBER:  # also false for NaN
        raise LoadTestFormatError(f"{name} line {line}: {column} must be a number from 0 to 2^53")
    return value


def _csv_text(name: str, content: bytes | str) -> str:
    try:
        text = content.decode("utf-8-sig") if isinstance(content, bytes) else content
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n") + 1
        raise LoadTestFormatError(f"{name} line {line}: not UTF-8 text ({error.reason})") from None
    for line, row in enumerate(text.splitlines(), start=1):
        _no_nul(name, f"line {line}", row)
    return text


def parse_csv(name: str, content: bytes | str) -> LoadTestRun:
    reader = csv.DictReader(io.StringIO(_csv_text(name, content)))
    try:
        return _read_csv(name, reader)
    except csv.Error as error:
        raise LoadTestFormatError(f"{name} line {reader.line_num}: {error}") from None


def _read_csv(name: str, reader: csv.DictReader) -> LoadTestRun:
    columns = [column.strip() for column in reader.fieldnames or []]
    reader.fieldnames = columns
    missing = [column for column in _CSV_REQUIRED if column not in columns]
    peak_column = next((column for column in _PEAK_COLUMNS if column in columns), None)
    if missing or peak_column is None:
        wanted = ", ".join((*missing, *([] if peak_column else ["card_peak_gib"])))
        raise LoadTestFormatError(f"{name}: the header lacks {wanted}")
    latency: dict[str, float] = {}
    rates: dict[str, float] = {}
    peaks: dict[str, int] = {}
    for row in reader:
        line = reader.line_num  # the row's last line: a quoted cell may span several
        model, card = (row.get("model") or "").strip(), (row.get("card") or "").strip()
        if not model or not card:
            raise LoadTestFormatError(f"{name} line {line}: model and card are required")
        # A short row has None for the columns it lacks.
        p99 = _float_cell(name, line, "p99_latency_ms", row["p99_latency_ms"] or "")
        latency[model] = max(latency.get(model, 0.0), p99)
        peak = _float_cell(name, line, peak_column, row[peak_column] or "")
        peaks[card] = max(peaks.get(card, 0), round(peak * _PEAK_COLUMNS[peak_column]))
        if (row.get("request_rate") or "").strip():
            rates[model] = _float_cell(name, line, "request_rate", row["request_rate"])
    if not latency:
        raise LoadTestFormatError(f"{name}: no rows")
    models = tuple(
        ModelRun(model=model, source=name, p99_latency_ms=p99, request_rate=rates.get(model))
        for model, p99 in latency.items()
    )
    return LoadTestRun("csv", models, peaks)


def parse_card_peaks(text: str) -> dict[str, int]:
    """``card,peak_gib`` lines (a header line and # comments allowed) -> card -> bytes."""
    peaks: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        _no_nul("card peaks", f"line {line_no}", line)
        line = line.split("#", 1)[0].strip()
        if not line or line.replace(" ", "") == "card,peak_gib":
            continue
        card, comma, value = line.rpartition(",")
        if not comma or not card.strip():
            raise LoadTestFormatError(f"card peaks line {line_no}: expected card,peak_gib")
        peak = _float_cell("card peaks", line_no, "peak_gib", value.strip())
        peaks[card.strip()] = round(peak * GIB)
    return peaks


def combine(files: list[tuple[str, bytes]], card_peaks_text: str = "") -> LoadTestRun:
    """One combined test from its files: several vLLM JSON results, or one CSV."""
    if not files:
        raise LoadTestFormatError("no files")
    csvs = [name for name, _ in files if name.lower().endswith(".csv")]
    if csvs:
        if len(files) > 1:
            raise LoadTestFormatError(
                "a CSV holds the whole combined test: upload it alone, not with other files"
            )
        name, content = files[0]
        run = parse_csv(name, content)
        extra = parse_card_peaks(card_peaks_text)
        return LoadTestRun(run.source_format, run.models, {**run.card_peaks, **extra})
    models = tuple(parse_vllm_result(name, content) for name, content in files)
    seen: dict[str, str] = {}
    for run in models:
        if run.model in seen:
            raise LoadTestFormatError(
                f"{seen[run.model]} and {run.source} are both results for {run.model}"
            )
        seen[run.model] = run.source
    return LoadTestRun("vllm-json", models, parse_card_peaks(card_peaks_text))
