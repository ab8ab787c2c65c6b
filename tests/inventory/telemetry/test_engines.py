"""Engine metrics parsers on the real samples, on simulated pages and on malformed input."""

from __future__ import annotations

import http.server
import json
import math
import threading

import pytest

from inventory.telemetry.engines import (
    EngineParseError,
    EngineScrapeError,
    ScrapeTarget,
    histogram_delta,
    http_fetch,
    latency_quantile,
    parse_ollama_ps,
    parse_sglang_metrics,
    parse_tei_metrics,
    parse_tgi_metrics,
    parse_vllm_metrics,
    scrape,
    scrape_all,
)
from inventory.telemetry.simulator.fleet import Fleet
from inventory.telemetry.simulator.scenarios import demo_fleet_specs

from .conftest import ENGINES


def fixture(name: str) -> str:
    return (ENGINES / name).read_text()


def test_vllm_v1_page_per_engine_labels_and_created_gauges():
    # vllm_v1_metrics.txt: a vLLM 0.10.0 page (engine="0" on every family; prometheus_client
    # writes each counter's `_created` as a gauge family of its own), see the fixtures README.
    reading = parse_vllm_metrics(fixture("vllm_v1_metrics.txt"))
    assert reading.kv_cache_usage == pytest.approx(9.75010481363281e-06)
    assert (reading.requests_running, reading.requests_waiting) == (1.0, 0.0)
    assert reading.preemptions_total == 2.0  # the `_total` sample, not the `_created` gauge
    e2e = reading.latency["e2e"]
    assert (e2e.count, e2e.sum_s, e2e.buckets[-2]) == (1.0, pytest.approx(96.43), (7680.0, 1.0))
    assert e2e.p50_s == pytest.approx(60 + 60 * 0.5)  # inside the 60-120 s bucket
    assert reading.cache_config == {}  # that page shows no vllm:cache_config_info


def test_sglang_page_from_its_documentation():
    # sglang_metrics.txt: the sample page of SGLang's docs/references/production_metrics.md.
    reading = parse_sglang_metrics(fixture("sglang_metrics.txt"))
    assert reading.kv_cache_usage == pytest.approx(0.28)  # sglang:token_usage
    assert (reading.requests_running, reading.requests_waiting) == (162.0, 2826.0)
    assert reading.latency["e2e"].count == 11228.0 and reading.latency["ttft"].count == 11008.0
    # most requests of that page took longer than the last finite bucket (60 s): PromQL's
    # estimate is then that bound, not a made-up tail
    assert reading.latency["e2e"].p50_s == 60.0
    assert reading.latency["itl"].count == 7_400_757.0
    assert reading.kv_pool_tokens is None  # no sglang:max_total_num_tokens on that page
    one = parse_sglang_metrics(fixture("sglang_metrics.txt"), "meta-llama/Llama-3.1-8B-Instruct")
    assert one.requests_running == 162.0
    with pytest.raises(EngineParseError):
        parse_sglang_metrics(fixture("sglang_metrics.txt"), "another-model")


def test_tgi_page_in_its_exporters_format():
    # tgi_metrics.txt: TGI's router families and duration buckets (35 of them, 0.0001 x 1.5^k),
    # as metrics-exporter-prometheus writes them: no `_total`, integer counts, blank lines.
    reading = parse_tgi_metrics(fixture("tgi_metrics.txt"))
    assert (reading.requests_running, reading.requests_waiting) == (3.0, 2.0)
    assert reading.cache_config == {"batch_current_max_tokens": "6144"}
    assert reading.kv_cache_usage is None and reading.process_start_time_s is None
    e2e = reading.latency["e2e"]
    assert (e2e.count, e2e.sum_s, len(e2e.buckets)) == (12.0, pytest.approx(25.39), 36)
    assert 0.9 < e2e.p50_s < 1.4 and reading.latency["queue"].count == 12.0
    assert 0.01 < reading.latency["itl"].p50_s < 0.02


def test_vllm_live_sample_older_kv_name_and_latency_histograms():
    text = fixture("vllm_metrics_live.txt")
    reading = parse_vllm_metrics(text)
    assert reading.kv_cache_usage == pytest.approx(0.314)  # vllm:gpu_cache_usage_perc
    assert reading.cache_config["num_gpu_blocks"] == "6400"
    e2e = reading.latency["e2e"]
    # +Inf buckets of model-0 .. model-19 are 3, 13, ..., 193: summed over label sets
    assert e2e.buckets[-1] == (math.inf, sum(3 + 10 * i for i in range(20)))
    assert e2e.p50_s is not None and 0 < e2e.p50_s <= 0.005
    one = parse_vllm_metrics(text, model_name="model-3").latency["e2e"]
    assert one.buckets[-1][1] == 33.0 and one.count == 22.0


def test_vllm_newer_kv_name_from_the_simulator_parses_with_the_same_code():
    fleet = Fleet(demo_fleet_specs(), seed=1)
    fleet.advance_to(14 * 3600, max_step_s=60)
    v1 = fleet.fetch("sim://infer-01/chat-large/metrics")
    assert "vllm:kv_cache_usage_perc" in v1 and "gpu_cache_usage_perc" not in v1
    reading = parse_vllm_metrics(v1)
    replica = fleet.hosts["infer-01"].replica("chat-large")
    assert reading.kv_cache_usage == pytest.approx(replica.kv_usage, abs=1e-3)
    assert reading.requests_running == round(replica.running)
    assert reading.latency["e2e"].count == math.floor(replica.histogram.count)
    v0 = fleet.fetch("sim://mig-h200/mistral-7b/metrics")
    assert "vllm:gpu_cache_usage_perc" in v0
    assert parse_vllm_metrics(v0).kv_cache_usage is not None


def test_sglang_and_tgi_pages_from_the_simulator():
    fleet = Fleet(demo_fleet_specs(), seed=2)
    fleet.advance_to(15 * 3600, max_step_s=60)
    host = fleet.hosts["infer-01"]
    sglang = parse_sglang_metrics(fleet.fetch("sim://infer-01/code-medium/metrics"))
    assert sglang.kv_cache_usage == pytest.approx(host.replica("code-medium").kv_usage, abs=1e-3)
    assert sglang.requests_waiting == round(host.replica("code-medium").waiting)
    assert sglang.latency["e2e"].p99_s > sglang.latency["e2e"].p50_s > 0
    tgi = parse_tgi_metrics(fleet.fetch("sim://infer-01/embed-small/metrics"))
    assert tgi.requests_running == round(host.replica("embed-small").running)
    assert tgi.kv_cache_usage is None and tgi.latency["e2e"].count > 0


def test_the_simulated_tgi_page_has_tgis_own_duration_buckets():
    fleet = Fleet(demo_fleet_specs(), seed=2)
    fleet.advance_to(15 * 3600, max_step_s=60)
    simulated = parse_tgi_metrics(fleet.fetch("sim://infer-01/embed-small/metrics"))
    real = parse_tgi_metrics(fixture("tgi_metrics.txt"))
    bounds = [le for le, _ in simulated.latency["e2e"].buckets]
    assert bounds == [le for le, _ in real.latency["e2e"].buckets]
    assert bounds[0] == pytest.approx(0.00015) and bounds[-2] == pytest.approx(145.61, abs=0.01)


def test_an_embedding_model_is_served_by_tei_with_no_kv_cache():
    # TEI's families (router/src: te_request_count, te_request_duration; core/src/queue.rs:
    # te_queue_size), written as its exporter writes them.
    page = (
        "# TYPE te_queue_size gauge\nte_queue_size 3\n"
        '# TYPE te_request_count counter\nte_request_count{method="single"} 40\n'
        'te_request_count{method="batch"} 2\n'
        "# TYPE te_request_duration histogram\n"
        'te_request_duration_bucket{le="0.01"} 30\nte_request_duration_bucket{le="+Inf"} 42\n'
        "te_request_duration_sum 0.9\nte_request_duration_count 42\n"
    )
    reading = parse_tei_metrics(page)
    assert (reading.engine, reading.requests_waiting, reading.latency["e2e"].count) == (
        "tei",
        3.0,
        42.0,
    )
    assert reading.kv_cache_usage is None and reading.requests_running is None
    with pytest.raises(EngineParseError):
        parse_tei_metrics(fixture("tgi_metrics.txt"))
    fleet = Fleet(demo_fleet_specs(), seed=2)
    fleet.advance_to(10 * 3600, max_step_s=60)
    simulated = fleet.fetch("sim://mig-h200/bge-m3/metrics")
    assert "te_queue_size" in simulated and "kv_cache" not in simulated
    assert parse_tei_metrics(simulated).latency["e2e"].count > 0


def test_ollama_ps_sample_and_model_filter():
    reading = parse_ollama_ps(fixture("ollama_ps.json"))
    assert [m.name for m in reading.models] == ["llama3:8b"]
    assert reading.vram_bytes == 4811340143 and reading.models[0].context_length == 4096
    assert parse_ollama_ps(fixture("ollama_ps.json"), "other").vram_bytes == 0


@pytest.mark.parametrize(
    "text",
    [
        "vllm:num_requests_running{ 3.0\n",
        "this is not prometheus text\n",
        'vllm:num_requests_running 1.0\nvllm:num_requests_running{model_name="a"} abc\n',
        "",  # an empty page is not a vLLM page
        "# TYPE other gauge\nother 1.0\n",
    ],
)
def test_vllm_malformed_or_foreign_text_raises_engine_parse_error(text):
    with pytest.raises(EngineParseError):
        parse_vllm_metrics(text)


def test_histogram_without_inf_bucket_or_with_bad_le_is_malformed():
    base = "vllm:num_requests_running 1.0\n"
    no_inf = base + 'vllm:e2e_request_latency_seconds_bucket{le="0.5"} 3.0\n'
    with pytest.raises(EngineParseError, match=r"\+Inf"):
        parse_vllm_metrics(no_inf)
    bad_le = base + 'vllm:e2e_request_latency_seconds_bucket{le="soon"} 3.0\n'
    with pytest.raises(EngineParseError, match="le="):
        parse_vllm_metrics(bad_le)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"models": 3}',
        '{"models": [{"name": "x", "size": 1}]}',
        '{"models": [{"name": "x", "size": 1, "size_vram": -5}]}',
        '{"models": [{"size": 1, "size_vram": 1}]}',
    ],
)
def test_ollama_malformed_raises(text):
    with pytest.raises(EngineParseError):
        parse_ollama_ps(text)


def test_sglang_and_tgi_reject_pages_of_other_engines():
    with pytest.raises(EngineParseError):
        parse_sglang_metrics(fixture("vllm_v1_metrics.txt"))
    with pytest.raises(EngineParseError):
        parse_tgi_metrics(fixture("vllm_v1_metrics.txt"))


def test_latency_quantile_is_none_for_an_interval_without_requests():
    # The interpolation itself is tested with inventory.analytics.stats.histogram_quantile.
    buckets = ((0.1, 10.0), (0.5, 60.0), (1.0, 100.0), (math.inf, 100.0))
    assert latency_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * 40 / 50)
    assert latency_quantile(0.5, ((1.0, 0.0), (math.inf, 0.0))) is None
    assert latency_quantile(0.5, ()) is None


def test_histogram_delta_gives_the_interval_and_none_across_a_restart():
    earlier = ((0.5, 10.0), (math.inf, 20.0))
    later = ((0.5, 15.0), (math.inf, 40.0))
    assert histogram_delta(later, earlier) == ((0.5, 5.0), (math.inf, 20.0))
    assert histogram_delta(((0.5, 1.0), (math.inf, 2.0)), later) is None  # restarted
    assert histogram_delta(((0.5, 9.0), (math.inf, 90.0)), earlier) is None  # a bucket went back
    assert histogram_delta(((1.0, 15.0), (math.inf, 40.0)), earlier) is None  # other buckets


def test_scrape_all_turns_every_failure_into_a_fault():
    pages = {
        "http://a/metrics": fixture("vllm_v1_metrics.txt"),
        "http://b/metrics": "garbage here\n",
    }

    def fetch(url, timeout):
        if url not in pages:
            raise EngineScrapeError(f"GET {url}: refused")
        return pages[url]

    targets = [
        ScrapeTarget("dep-a", "vllm", "http://a/metrics"),
        ScrapeTarget("dep-b", "vllm", "http://b/metrics"),
        ScrapeTarget("dep-c", "sglang", "http://c/metrics"),
        ScrapeTarget("dep-d", "mystery", "http://a/metrics"),
    ]
    readings, faults = scrape_all(targets, fetch, clock=lambda: 5.0)
    assert [(r.deployment_id, r.ts) for r in readings] == [("dep-a", 5.0)]
    assert [(f.call, f.error) for f in faults] == [
        ("scrape:vllm", "EngineParseError"),
        ("scrape:sglang", "EngineScrapeError"),
        ("scrape:mystery", "EngineParseError"),
    ]
    assert all(f.card_index is None and "dep-" in f.message for f in faults)


def test_http_fetch_reads_a_local_endpoint_and_reports_a_dead_one():
    body = fixture("vllm_v1_metrics.txt").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        reading = scrape(ScrapeTarget("d", "vllm", url), http_fetch, timeout=5)
        assert reading.requests_running == 1.0
    finally:
        thread.join(timeout=5)
        server.server_close()
    with pytest.raises(EngineScrapeError):
        http_fetch(url, 0.5)  # nothing listens any more


def test_simulated_allocator_stats_have_torch_keys():
    fleet = Fleet(demo_fleet_specs(), seed=3)
    fleet.advance_to(6 * 3600, max_step_s=120)
    stats = json.loads(fleet.fetch("sim://infer-01/chat-large/memory_stats"))
    assert len(stats) == 3  # one process per card of its group
    for entry in stats:
        memory = entry["memory_stats"]
        assert memory["reserved_bytes.all.current"] >= memory["allocated_bytes.all.current"]
        assert memory["inactive_split_bytes.all.current"] > 0  # six hours of churn
        assert entry["largest_free_block_bytes"] >= 0
    with pytest.raises(EngineScrapeError):
        fleet.fetch("sim://infer-01/nope/metrics")


def test_vllm_cache_config_info_gives_the_engines_own_pool():
    # tests/fixtures/engines/vllm_metrics_live.txt, a real vLLM serving llava-1.5-7b:
    # num_gpu_blocks="6400", block_size="16", gpu_memory_utilization="0.92".
    reading = parse_vllm_metrics(fixture("vllm_metrics_live.txt"))
    assert reading.kv_pool_tokens == 6400 * 16 == 102_400
    assert reading.memory_fraction == pytest.approx(0.92)
    assert reading.kv_pool_bytes is None  # the pool was sized by the fraction, not in bytes


def test_cache_config_labels_that_are_not_numbers_give_no_pool():
    reading = parse_vllm_metrics(
        "vllm:num_requests_running 1\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="None",'
        'kv_cache_memory_bytes="None",gpu_memory_utilization="abc"} 1.0\n'
    )
    assert (reading.kv_pool_tokens, reading.kv_pool_bytes, reading.memory_fraction) == (
        None,
        None,
        None,
    )
    stated = parse_vllm_metrics(
        "vllm:num_requests_running 1\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="661",'
        'kv_cache_memory_bytes="3221225472"} 1.0\n'
    )
    assert (stated.kv_pool_tokens, stated.kv_pool_bytes) == (661 * 16, 3 * 1024**3)


def test_sglang_reports_its_kv_pool_in_tokens():
    # sglang:max_total_num_tokens: the KV pool's capacity, one gauge per TP rank.
    reading = parse_sglang_metrics(
        'sglang:token_usage{tp_rank="0"} 0.25\n'
        'sglang:num_running_reqs{tp_rank="0"} 4\n'
        'sglang:max_total_num_tokens{tp_rank="0"} 471258\n'
        'sglang:max_total_num_tokens{tp_rank="1"} 471258\n'
    )
    assert reading.kv_pool_tokens == 471_258
    assert reading.kv_cache_usage == pytest.approx(0.25)
