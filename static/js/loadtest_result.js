// The result page of a combined load test: P50/P99 per model over time, card peaks vs bounds.
(function () {
  const data = JSON.parse(document.getElementById("load-test-chart-data").textContent);
  const traces = [];
  Object.entries(data.series || {}).forEach(([model, points]) => {
    const t = points.map((p) => p.t_s);
    traces.push({ x: t, y: points.map((p) => p.p99_ms), name: model + " P99", mode: "lines+markers" });
    traces.push({ x: t, y: points.map((p) => p.p50_ms), name: model + " P50", mode: "lines", line: { dash: "dot" } });
  });
  Plotly.newPlot("latency-chart", traces, {
    margin: { t: 10 }, xaxis: { title: "s into the test" }, yaxis: { title: "ms" },
  }, { displayModeBar: false, responsive: true });
  const cards = data.cards || [];
  const gib = (b) => (b == null ? null : b / 1024 ** 3);
  Plotly.newPlot("cards-chart", [
    { type: "bar", x: cards.map((c) => c.card), y: cards.map((c) => gib(c.peak_bytes)), name: "peak (telemetry)" },
    { type: "scatter", mode: "markers", x: cards.map((c) => c.card), y: cards.map((c) => gib(c.bound_bytes)), name: "bound", marker: { symbol: "line-ew-open", size: 30 } },
  ], { margin: { t: 10 }, yaxis: { title: "GiB" } }, { displayModeBar: false, responsive: true });
})();
