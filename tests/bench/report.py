"""docs/benchmarks.md from the figures the benchmarks wrote."""

from __future__ import annotations

from tests.bench.bench_placement import bin_packing_table, fleet_table


def _ok(passed: bool) -> str:
    return "met" if passed else "**not met**"


def ingest_section(figures: dict) -> str:
    single = figures["ingest_path_rows_per_s"]
    parallel = figures["parallel_ingest_rows_per_s"]
    lines = [
        "## Ingest throughput (issues 3 and 11)",
        "",
        "`python tests/bench/bench_ingest.py` — "
        f"{figures['batches']} agent batches (8 cards, 4 processes a card) = "
        f"{figures['process_rows']:,} process-sample rows; groups of {figures['group']}; "
        f"PostgreSQL {figures['postgres']}.",
        "",
        "| path | process rows/s |",
        "|---|---|",
        f"| real ingest path, 1 worker (decode, signature, full batch check, claim, binary "
        f"COPY into the partitions, events, status) | {single:,.0f} |",
        f"| the same, then its 1 m and 1 h rollups refreshed (one core) | "
        f"{figures['ingest_and_rollups_rows_per_s']:,.0f} |",
        f"| {figures['workers']} workers at once, each ingesting and refreshing its rollups | "
        f"{parallel:,.0f} |",
        f"| Django ORM bulk_create, 1 process (decode, build models, bulk_create; no rollups) "
        f"| {figures['orm_bulk_create_rows_per_s']:,.0f} |",
        f"| Django ORM bulk_create, {figures['workers']} processes | "
        f"{figures['parallel_orm_rows_per_s']:,.0f} |",
    ]
    for broker in figures.get("brokers", []):
        lines.append(
            f"| through the broker ({broker['broker']}), 1 worker | {broker['rows_per_s']:,.0f} |"
        )
    if "raw_copy_rows_per_s" in figures:
        lines.append(
            f"| raw binary COPY of the same process rows, already built, into the same table "
            f"(the floor) | {figures['raw_copy_rows_per_s']:,.0f} |"
        )
    best = max(single, parallel)
    combined = figures["ingest_and_rollups_rows_per_s"]
    lines += [
        "",
        f"- Target at least 50,000 rows/s: {_ok(best >= 50_000)} ({single:,.0f} rows/s through"
        f" one worker; {combined:,.0f} with the rollup refresh on the same core; "
        f"{parallel:,.0f} with {figures['workers']} workers and their refreshes).",
        f"- Target at least 5x the ORM path: {_ok(figures['speedup_vs_orm'] >= 5)} "
        f"({figures['speedup_vs_orm']:.1f}x with one worker each, "
        f"{figures['parallel_speedup_vs_orm']:.1f}x with {figures['workers']} each).",
    ]
    if "writer_fraction_of_raw_copy" in figures:
        fraction = figures["writer_fraction_of_raw_copy"]
        lines.append(
            f"- The writer's rows/s as a share of raw binary COPY: {fraction:.0%} (target at "
            f"least 50%: {_ok(fraction >= 0.5)})."
        )
    slow = [b for b in figures.get("brokers", []) if b["rows_per_s"] < 50_000]
    if slow:
        lines.append(
            "- Target at least 50,000 rows/s through every broker: **not met** through "
            + ", ".join(f"{b['broker']} ({b['rows_per_s']:,.0f})" for b in slow)
            + "."
        )
    if any(broker["broker"].startswith("redis") for broker in figures.get("brokers", [])):
        lines.append(
            "- Through Redis, kombu's transport makes several round trips for each message "
            "(the pop, its bookkeeping of unacknowledged messages, the ack), where RabbitMQ "
            "streams a prefetched window: at fleet scale, give ingest RabbitMQ."
        )
    return "\n".join(lines)


def collector_section(figures: dict) -> str:
    cpu = figures["cpu_per_poll"]
    lines = [
        "## Collector CPU and host-agent memory (issue 3)",
        "",
        "`python tests/bench/bench_collector.py`",
        "",
        f"- Collector CPU per poll of an 8-card host with 4 processes per card, NVML time "
        f"excluded: **{cpu['collector_ms']:.3f} ms** (target at most 2 ms: "
        f"{_ok(cpu['collector_ms'] <= 2)}). Method: poll against a stub that replays recorded "
        f"NVML answers ({cpu['poll_with_stub_ms']:.3f} ms), minus the stub alone "
        f"({cpu['stub_only_ms']:.3f} ms); cross-check against the live fake: "
        f"{cpu['live_collector_ms']:.3f} ms.",
    ]
    memory = figures.get("memory")
    if memory:
        series = memory["series"]
        settled = [row for row in series if row["elapsed_s"] >= 60] or series
        rss = [row["rss_mib"] for row in settled]
        lines += [
            f"- Host agent (Agent + HostRuntime per host, demo fleet of 5 hosts) over "
            f"{memory['minutes']:g} minutes at up to {memory['speed_asked']:g}x "
            f"({memory['simulated_hours']:.1f} simulated hours, "
            f"{series[-1]['batches']} batches): RSS {min(rss):.1f}-{max(rss):.1f} MiB after the "
            f"first minute (spread {max(rss) - min(rss):.1f} MiB): flat.",
            "",
            "| real s | simulated hour | RSS MiB | traced MiB | batches |",
            "|---|---|---|---|---|",
            *(
                f"| {row['elapsed_s']:.0f} | {row['sim_hour']:.2f} | {row['rss_mib']:.1f} "
                f"| {row['traced_mib']:.2f} | {row['batches']} |"
                for row in series
            ),
        ]
    return "\n".join(lines)


def pages_section(figures: dict) -> str:
    targets = {"fleet board /": 300, "host page /hosts/<name>/": 150}
    lines = [
        "## Page server times with a big fleet (issue 4)",
        "",
        f"`python tests/bench/bench_pages.py` — {figures['hosts']:,} hosts x 8 cards "
        f"({figures['cards']:,} cards) with 30 days of history in the rollups; median of "
        "repeated requests through Django's test client as a logged-in manager.",
        "",
        "| page | median ms | target | size |",
        "|---|---|---|---|",
    ]
    for label, figure in figures.items():
        if not isinstance(figure, dict) or "median_ms" not in figure:
            continue
        target = targets.get(label)
        verdict = f"at most {target} ms: {_ok(figure['median_ms'] <= target)}" if target else ""
        lines.append(
            f"| {label} | {figure['median_ms']:.1f} | {verdict} | {figure['bytes']:,} bytes |"
        )
    heatmap = figures["host charts 30d (JSON)"]["bytes"]
    lines += ["", f"- 30-day heatmap payload: {heatmap:,} bytes (target at most 500 KB: "
              f"{_ok(heatmap <= 500_000)})."]  # fmt: skip
    return "\n".join(lines)


def placement_section(figures: dict) -> str:
    lines = [
        "## Placement (issue 5)",
        "",
        f"`python tests/bench/bench_placement.py --limit {figures['limit_s']:g}`",
        "",
        bin_packing_table(figures["bin_packing"], figures["limit_s"]),
    ]
    if figures.get("fleet"):
        lines += ["", fleet_table(figures["fleet"])]
    return "\n".join(lines)


def loadtest_section(figures: dict) -> str:
    from tests.bench.bench_loadtest import table

    return "\n".join(
        [
            "## Combined load-test runner (issue 14)",
            "",
            f"`python tests/bench/bench_loadtest.py --rps {figures['offered_rps']:g} "
            f"--hold {figures['hold_s']:g} --latency-ms {figures['latency_ms']:g}`: four "
            "models at once from one core, open loop, streaming, against the simulator's "
            "endpoint server in another process told to answer in exactly that latency.",
            "",
            table(figures),
        ]
    )


def faults_section(figures: dict) -> str:
    from tests.bench.faults import table

    phases = figures["phases"]
    clean = all(p["batches_lost"] == 0 and p["doubled"] == 0 for p in phases)
    kept = all(p["polls_taken"] >= p["polls_due"] for p in phases)
    letters = sum(figures["dead_letters"].values())
    written = sum(figures["hostile_written"].values())
    lines = [
        "## Fault campaign (issue 11)",
        "",
        f"`python tests/bench/faults.py --outage {figures['outage_s']:g}` — {figures['hosts']} "
        f"simulated hosts ({figures['cards']} cards) collected by a real agent process "
        f"(sample {figures['sample_interval_s']:g} s, flush {figures['flush_interval_s']:g} s), "
        f"one real ingest worker, a private PostgreSQL and a private {figures['broker']}; "
        f"{figures['healthy_s']:g} s of healthy traffic before and after each fault; "
        f"{figures['wall_s'] / 60:.0f} minutes in all. RabbitMQ was not tried.",
        "",
        table(figures),
        "",
        f"- 0 lost and 0 doubled for each fault: {_ok(clean)}.",
        f"- Every poll kept while an agent process runs: {_ok(kept)}. Polls an agent cannot take "
        "while its process is dead are in the agent-down column, not in the due ones.",
        f"- Hostile messages: {figures['hostile_sent']:,} sent, {letters:,} dead letters, "
        f"{written} written: "
        + ", ".join(f"{code} {n}" for code, n in figures["dead_letters"].items())
        + ".",
        f"- Left in the broker unacknowledged at the end: {figures['unacked_left_in_broker']}.",
    ]
    by_kind = figures.get("dead_letters_by_kind", {})
    if by_kind:
        lines += [
            "",
            "| hostile kind | sent | dead letters by reason | written |",
            "|---|---|---|---|",
        ]
        for kind, sent in figures["hostile_kinds"].items():
            reasons = ", ".join(f"{code} {n}" for code, n in by_kind.get(kind, {}).items())
            written = figures["hostile_written"].get(kind, 0)
            lines.append(f"| {kind} | {sent} | {reasons or '-'} | {written} |")
        unnamed = {k: v for k, v in by_kind.items() if k not in figures["hostile_kinds"]}
        for kind, reasons in unnamed.items():
            lines.append(f"| ({kind}) | - | {sum(reasons.values())} | - |")
        lines.append("")
    for phase in phases:
        for note in phase["notes"]:
            lines.append(f"- {phase['name']}: {note}.")
    return "\n".join(lines)


SECTIONS = {"ingest": ingest_section, "collector": collector_section,
            "pages": pages_section, "placement": placement_section,
            "faults": faults_section, "loadtest": loadtest_section}  # fmt: skip


def benchmarks_markdown(figures: dict) -> str:
    parts = [
        "# Benchmarks",
        "",
        "Measured with `make bench` (`python -m tests.bench.run_all`; `--only ingest` re-runs "
        "one). Each section names the script behind it, the day and the machine; the raw "
        "figures are in `docs/benchmarks.json`.",
    ]
    for name, section in SECTIONS.items():
        if name in figures:
            measured = figures[name]
            parts += [
                "",
                section(measured),
                "",
                f"_Measured {measured.get('measured_on', '?')} on {measured.get('machine', '?')}._",
            ]
    return "\n".join(parts) + "\n"
