"""docs/benchmarks.md from the figures the benchmarks wrote."""

from __future__ import annotations

from tests.bench.bench_placement import bin_packing_table, fleet_table


def _ok(passed: bool) -> str:
    return "met" if passed else "**not met**"


def _seconds(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


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
        f"| real ingest path, 1 worker (typed decoding with the field checks, signature, "
        f"checks across fields, claim, binary COPY into the partitions, events, status) | "
        f"{single:,.0f} |",
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
        if "parallel_rows_per_s" in broker:
            lines.append(
                f"| through the broker ({broker['broker']}), {broker['workers']} workers at "
                f"once | {broker['parallel_rows_per_s']:,.0f} |"
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
    if "writer_stage_fraction_of_raw_copy" in figures:
        stage = figures["writer_stage_fraction_of_raw_copy"]
        lines.append(
            f"- The writer's rows/s (ingest_batches, given the decoded and verified batches: "
            f"the checks across fields, claim, binary COPYs, events, statuses, commit) as a share "
            f"of raw binary COPY into the same table, in the same run: {stage:.0%} (target at "
            f"least 50%: {_ok(stage >= 0.5)}); {figures['writer_stage_s']:.2f} s of the whole "
            f"path's {figures['ingest_path_s']:.2f} s in its best round."
        )
    if "writer_fraction_of_raw_copy" in figures:
        fraction = figures["writer_fraction_of_raw_copy"]
        lines.append(
            f"- The whole path's rows/s, from the message bytes (taking the messages in: typed "
            f"decoding with the field checks and the HMAC of each body; then the writer), as a "
            f"share of raw binary COPY: {fraction:.0%}"
            + (
                f", the best of {figures['rounds']} alternating rounds of each (whole path "
                f"{_seconds(figures['ingest_path_rounds_s'])} s, raw COPY "
                f"{_seconds(figures['raw_copy_rounds_s'])} s; "
                f"{figures['writer_fraction_of_raw_copy_median']:.0%} of the medians)."
                if "rounds" in figures
                else "."
            )
        )
    if "process_copy_s" in figures:
        lines.append(
            f"- Of the whole path's {figures['ingest_path_s']:.2f} s, the COPY of the process "
            f"rows (each batch checked and its rows built while PostgreSQL takes in the last's) "
            f"takes {figures['process_copy_s']:.2f} s and that of the card, engine and MIG rows "
            f"with the dirty minutes {figures['other_copy_s']:.2f} s; raw COPY of the process "
            f"rows alone, {figures['process_rows'] / figures['raw_copy_rows_per_s']:.2f} s."
        )
    if "decode_share_of_writer" in figures:
        lines.append(
            f"- Decoding the batches' JSON, with the field checks done while decoding (msgspec),"
            f" takes {figures['decode_share_of_writer']:.0%} of the whole path's time in the same "
            f"run ({figures['decode_only_s'] / figures['batches'] * 1e6:.0f} µs a batch)."
        )
    if "wire_bytes_per_batch" in figures:
        lines.append(
            f"- A batch travels with its process rows as columns (gpu-telemetry-batch/2): "
            f"{figures['wire_bytes_per_batch']:,.0f} bytes of JSON, against "
            f"{figures['row_form_bytes_per_batch']:,.0f} as rows (/1, still accepted)."
        )
    for broker in figures.get("brokers", []):
        one, together = broker["rows_per_s"], broker.get("parallel_rows_per_s")
        if one >= 50_000:
            verdict = "met"
        elif together is not None and together >= 50_000:
            verdict = f"met with {broker['workers']} workers at once, **not met** with one"
        else:
            verdict = _ok(False)
        lines.append(
            f"- Target at least 50,000 rows/s through {broker['broker']}: {verdict} "
            f"({one:,.0f} with one worker"
            + (f", {together:,.0f} with {broker['workers']})." if together is not None else ").")
        )
    if figures.get("brokers"):
        lines.append(
            "- Batches travel zlib-compressed (about a tenth of their JSON), so the broker "
            "copies a tenth of the bytes; over Redis the ingest worker takes and acks a whole "
            "group per round trip (inventory/ingest/redis_groups.py), over RabbitMQ it acks "
            "a group in one frame."
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
    if signals := figures.get("signals"):
        events = ", ".join(f"{count} {kind}" for kind, count in sorted(signals["events"].items()))
        lines += [
            "",
            "### Sampling with every real-host signal source on (issue 12)",
            "",
            f"`python tests/bench/bench_collector.py --skip-memory --signals-seconds "
            f"{signals['seconds']:g}`: an 8-card host through the real NVML code path against "
            "the fake NVML, 0.5 s polls in real time; 8 engine logs receiving lines with a vLLM "
            "OOM traceback every few seconds, kmsg records with Xids, the MPS control daemon "
            "asked by its own thread (fake control binary), a process replaced every 4 s.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| polls taken / due | {signals['polls_taken']} / {signals['polls_due']} |",
            f"| sampling tick CPU per poll, mean / max | {signals['tick_cpu_ms_mean']:.2f} ms / "
            f"{signals['tick_cpu_ms_max']:.2f} ms |",
            f"| MPS control processes' CPU per poll | "
            f"{signals['mps_control_cpu_ms_per_poll']:.1f} ms (the fake is a Python script; the "
            "real `nvidia-cuda-mps-control` is a small C client) |",
            f"| events raised | {events} |",
        ]
    return "\n".join(lines)


def pages_section(figures: dict) -> str:
    # Issue 4's pages, and issue 17's: the board's 15-s refresh and the analyses fragment.
    targets = {
        "fleet board /": (300, None),
        "fleet board refresh (page 1)": (100, 100_000),
        "host page /hosts/<name>/": (150, None),
        "host analyses (fragment)": (100, None),
        "host analyses, shared cards": (100, None),
    }
    lines = [
        "## Page server times with a big fleet (issues 4 and 17)",
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
        ms, size = targets.get(label, (None, None))
        verdicts = []
        if ms:
            verdicts.append(f"at most {ms} ms: {_ok(figure['median_ms'] <= ms)}")
        if size:
            verdicts.append(f"at most {size // 1000} KB: {_ok(figure['bytes'] <= size)}")
        lines.append(
            f"| {label} | {figure['median_ms']:.1f} | {'; '.join(verdicts)} "
            f"| {figure['bytes']:,} bytes |"
        )
    heatmap = figures["host charts 30d (JSON)"]["bytes"]
    lines += ["", f"- 30-day heatmap payload: {heatmap:,} bytes (target at most 500 KB: "
              f"{_ok(heatmap <= 500_000)})."]  # fmt: skip
    if "baseline" in figures:
        baseline = figures["baseline"]
        lines.append(f"- Before {baseline['change']} (measured {baseline['measured_on']}, "
                     f"{baseline['conditions']}):")  # fmt: skip
        for label, before in baseline["pages"].items():
            now = figures.get(label, {}).get("median_ms")
            after = f"{now:.1f} ms now" if now is not None else "not measured now"
            lines.append(f"  - {label}: {before['median_ms']:.1f} ms, {before['bytes']:,} "
                         f"bytes; {after}")  # fmt: skip
    if "load_average" in figures:
        began, ended = figures["load_average"]
        lines.append(
            f"- Load average (1 min) when the timing began and ended: {began:.1f} and "
            f"{ended:.1f}, on {figures.get('cores', '?')} cores (above the core count the "
            "machine was busy with other work too)."
        )
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
    statuses = figures.get("collector_status", [])
    if statuses:
        missing = sum(status["missing_batches"] for status in statuses)
        lines.append(
            f"- Missing batches in the collector statuses at the end (what the host pages "
            f"show): {missing} on {len(statuses)} hosts"
            + ("." if missing == 0 else ", though none was lost: **a miscount**.")
        )
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


def disk_section(figures: dict) -> str:
    noise = " --noise" if figures.get("noise") else ""
    lines = [
        "## Disk per host, memory figures that move every interval (issue 31)"
        if noise
        else "## Disk per host (issues 19 and 31)",
        "",
        f"`python tests/bench/bench_disk.py --hosts {figures['hosts']}{noise}` — "
        f"{figures['hosts']} hosts x {figures['hours']:g} h of bench_ingest's batches (8 cards, "
        f"4 processes a card, one batch every {figures['flush_interval_s']} s; "
        f"{figures['batches']:,} batches) through the real ingest path, then the rollups; each "
        "table's partitions with their indexes and TOAST after VACUUM, first as rows, then "
        f"packed (inventory.timeseries.packing: {figures['pack_steps']} steps, "
        f"{figures['pack_s']:g} s), in the same run. docs/deploy.md sizes hosts from these."
        + (
            " With --noise every memory figure moves by up to 256 MiB each interval: random "
            "low bits do not compress, so each such figure keeps about its 8 bytes."
            if noise
            else ""
        ),
        "",
        "| table | rows | as rows, bytes | bytes a row | packed, bytes | packed, bytes a row |",
        "|---|---|---|---|---|---|",
    ]
    for name, table in figures["tables"].items():
        if table["rows"]:
            packed = table["packed_bytes"] or table["bytes"]
            lines.append(
                f"| {name} | {table['rows']:,} | {table['bytes']:,} | {table['bytes_per_row']} "
                f"| {packed:,} | {packed / table['rows']:.1f} |"
            )
    mb = 1e6
    lines += [
        "",
        f"- Raw samples a host a day: {figures['raw_rows_bytes_per_host_day'] / mb:.1f} MB as "
        f"rows, **{figures['raw_packed_bytes_per_host_day'] / mb:.2f} MB packed** (target "
        "at most 10 MB).",
        f"- Minute rollups a host a day: {figures['minute_rows_bytes_per_host_day'] / mb:.1f} "
        f"MB as rows, **{figures['minute_packed_bytes_per_host_day'] / mb:.2f} MB packed** "
        "(target at most 2 MB).",
        "- Rows not yet packed (the open hour and the one before, until 15 minutes past): "
        f"about {figures['raw_rows_working_set_bytes_per_host'] / mb:.1f} MB raw and "
        f"{figures['minute_rows_working_set_bytes_per_host'] / mb:.1f} MB of minutes a host, "
        "whatever the retention.",
    ]
    return "\n".join(lines)


def partition_section(figures: dict) -> str:
    cut = figures["cut_host"]
    lines = [
        "## Partition: one host's link cut (issue 19)",
        "",
        f"`python tests/bench/bench_partition.py --cut {figures['cut_s']:g}` "
        "(tests/deploy/test_partition.py) — three simulated hosts' agent processes, each in a "
        "network namespace of its own, publish over veth links to a private redis-server on "
        f"the root namespace (flush {figures['flush_interval_s']:g} s); one ingest worker "
        f"writes to PostgreSQL. `ip link set … down` cuts {cut}'s link for "
        f"{figures['cut_s']:g} s, then it comes back; the agents are stopped cleanly at the "
        "end and everything still waiting is drained.",
        "",
        "| host | batches expected | written | lost | doubled | arrived out of order |",
        "|---|---|---|---|---|---|",
    ]
    for name, host in figures["hosts"].items():
        label = f"{name} (cut)" if name == cut else name
        lines.append(
            f"| {label} | {host['expected']} | {host['written']} | {host['lost']} | "
            f"{host['doubled']} | {host['out_of_order_gaps']} |"
        )
    lines += [
        "",
        f"- {cut} made {figures['batches_made_during_cut']} batches while cut off; all were "
        f"written, in order, {figures['catch_up_s']:g} s after the link came back (time to "
        "catch up: the agent's publish backoff, which reaches its 30 s ceiling during a long "
        "cut, then the backlog goes in one pass).",
        f"- The board showed {cut} stale during the cut and live after; the other hosts were "
        "never stale, and their outboxes held at most the batch of the moment.",
        f"- {figures['batches_made_during_cut']} batches in {figures['cut_s']:g} s at a "
        f"{figures['flush_interval_s']:g} s flush: measured before batches kept to a fixed "
        "flush grid, when each interval was counted from the poll that closed the last one "
        "(2-3 s with 1 s polls; every poll still landed in a batch).",
    ]
    return "\n".join(lines)


def alerts_section(figures: dict) -> str:
    lines = [
        "## Alert evaluation (issue 13)",
        "",
        f"`python tests/bench/bench_alerts.py` — {figures['hosts']:,} hosts x 8 cards "
        f"({figures['cards']:,} cards), the {figures['rules']} default rules, "
        f"{figures['open_alerts']} alerts open; load average {figures['load_average']:.1f} "
        "while measured.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| one cycle, median of steady-state cycles | {figures['median_cycle_s']:.2f} s | "
        f"at most 1 s: {_ok(figures['median_cycle_s'] <= 1)} |",
        f"| its CPU in the evaluator | {figures['median_cycle_cpu_s']:.2f} s | |",
        f"| first cycle (opens the alerts) | {figures['first_cycle_s']:.2f} s | |",
        f"| queries per cycle, {figures['hosts'] // 10:,} hosts / {figures['hosts']:,} hosts | "
        f"{figures['queries_tenth_fleet']} / {figures['queries_whole_fleet']} | independent of "
        f"the fleet: {_ok(figures['queries_tenth_fleet'] == figures['queries_whole_fleet'])} |",
    ]
    latency = figures.get("latency")
    if latency:
        took, target = latency["crossing_to_notification_s"], latency["target_s"]
        lines.append(
            f"| crossing to webhook, real worker and beat (`for` {latency['for_s']:g} s, cycle "
            f"{latency['interval_s']:g} s) | {took:.1f} s | at most {target:g} s: "
            f"{_ok(took <= target)} |"
        )
    return "\n".join(lines)


def operations_section(figures: dict) -> str:
    planner = figures["planner_s"]
    pure = planner - figures["planner_read_s"]
    target = figures["planner_target_s"]
    return "\n".join(
        [
            "## Host operations (issue 16)",
            "",
            f"`python tests/bench/bench_operations.py` — {figures['hosts']:,} hosts, "
            f"{figures['cards']:,} cards, {figures['days']} days of hourly card rollups; "
            f"{figures['decision_cards']} cards at 96% for the degradation decision.",
            "",
            "| figure | measured | target |",
            "|---|---|---|",
            f"| off-peak planner, whole fleet, hourly (summaries read + planner) | {planner:.2f} s "
            f"| {target:.0f} s: {_ok(planner <= target)} |",
            f"| of which the pure planner (trough, candidates, schedule) | {pure:.2f} s | |",
            f"| once a day: the hosts' 30-day summaries from the hourly rollups | "
            f"{figures.get('summary_refresh_s', 0):.2f} s | |",
            f"| degradation decision for one card (samples, tenants, plan), median | "
            f"{figures['decision_p50_ms']:.1f} ms | |",
            f"| the same, 99th percentile | {figures['decision_p99_ms']:.1f} ms | "
            f"{figures['decision_target_ms']:.0f} ms: "
            f"{_ok(figures['decision_p99_ms'] <= figures['decision_target_ms'])} |",
            "",
            f"{figures['reloads_planned']:,} reloads planned (the cards whose fragmentation "
            "climbs, one in four).",
        ]
    )


def plans_section(figures: dict) -> str:
    return "\n".join([
        "## Collection plans, one beat pass (issue 31)",
        "",
        f"`python tests/bench/bench_plans.py` — {figures['hosts']:,} collected hosts, made "
        f"with bulk_create in {figures['setup_s']:.1f} s, none with a plan sent yet.",
        "",
        "| pass | plans sent | wall time | queries |",
        "|---|---|---|---|",
        *([f"| first pass (every plan sent) | {figures['first_plans_sent']:,} | "
           f"{figures['first_pass_s']:.2f} s | {figures['first_pass_queries']} |"]
          if "first_pass_s" in figures else []),
        f"| fleet unchanged (median) | {figures['unchanged_plans_sent']:,} | "
        f"{figures['unchanged_pass_s']:.2f} s | {figures['unchanged_pass_queries']} |",
        f"| one host changed | {figures['one_changed_plans_sent']:,} | "
        f"{figures['one_changed_pass_s']:.2f} s | {figures['one_changed_pass_queries']} |",
        *([f"| before: the first pass with a broker connection and an upsert a host | "
           f"{figures['first_plans_sent']:,} | {figures['baseline']['first_pass_s']:.2f} s | |"]
          if "first_pass_s" in figures.get("baseline", {}) else []),
        f"| before: per-host beat entries | {figures['old_plans_a_pass']:,} | (counted) | |",
    ])  # fmt: skip


def assembled_section(figures: dict) -> str:
    """A section assembled by hand from several runs, each with its command (the 10,000-host
    table; the pages read as rows and then packed; the write path before and after packing):
    its text is kept in benchmarks.json beside those runs' raw figures, and a re-run of one
    benchmark leaves it as it is."""
    return figures["text"]


SECTIONS = {"ingest": ingest_section, "collector": collector_section,
            "pages": pages_section, "placement": placement_section,
            "faults": faults_section, "disk": disk_section, "disk_noise": disk_section,
            "packed_reads": assembled_section, "write_path": assembled_section,
            "partition": partition_section, "alerts": alerts_section,
            "operations": operations_section, "loadtest": loadtest_section,
            "plans": plans_section, "ten_thousand": assembled_section}  # fmt: skip


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
