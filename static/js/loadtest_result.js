// The result page of a combined load test: P50/P99 per model over time, card peaks vs bounds.
// Each figure function builds a chart's traces and its text table from the same data.
"use strict";

(function () {
  const charts = window.consoleCharts;
  const data = charts.readJson("load-test-chart-data");
  const GIB = 1024 ** 3;
  const gib = (bytes) => (bytes === null || bytes === undefined ? null : bytes / GIB);

  function latencyFigure(series) {
    const traces = [];
    const rows = [];
    const seconds = gettext("s into the test");
    Object.entries(series).forEach(([model, points]) => {
      const t = points.map((p) => p.t_s);
      traces.push({ x: t, y: points.map((p) => p.p99_ms), name: `${model} P99`, mode: "lines+markers" });
      traces.push({ x: t, y: points.map((p) => p.p50_ms), name: `${model} P50`, mode: "lines", line: { dash: "dot" } });
      points.forEach((p) => rows.push([String(p.t_s), model, charts.number(p.p50_ms, 1), charts.number(p.p99_ms, 1)]));
    });
    rows.sort((a, b) => Number(a[0]) - Number(b[0]) || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    return {
      traces,
      // plotly.js 3 and later draw an axis title only as {text}.
      layout: { xaxis: { title: { text: seconds } }, yaxis: { title: { text: "ms" } }, legend: { orientation: "h", y: -0.25 } },
      table: {
        caption: gettext("End-to-end latency per 5 s of the test (ms)"),
        columns: [{ label: seconds, numeric: true }, { label: gettext("Model") },
                  { label: "P50", numeric: true }, { label: "P99", numeric: true }],
        rows,
      },
    };
  }

  function cardsFigure(cards) {
    const peak = gettext("peak (telemetry)");
    const bound = gettext("bound");
    return {
      traces: [
        { type: "bar", x: cards.map((c) => c.card), y: cards.map((c) => gib(c.peak_bytes)), name: peak },
        { type: "scatter", mode: "markers", x: cards.map((c) => c.card), y: cards.map((c) => gib(c.bound_bytes)), name: bound,
          marker: { symbol: "line-ew-open", size: 30 } },
      ],
      layout: { yaxis: { title: { text: "GiB" } } },
      table: {
        caption: gettext("Each card's memory peak in the test against its bound (GiB)"),
        columns: [{ label: gettext("Card") }, { label: peak, numeric: true }, { label: bound, numeric: true }],
        rows: cards.map((c) => [c.card, charts.number(gib(c.peak_bytes), 2), charts.number(gib(c.bound_bytes), 2)]),
      },
    };
  }

  function drawFigure(element, figure) {
    charts.draw(element, figure.traces, figure.layout, figure.table);
  }

  const series = data.series || {};
  const latency = document.getElementById("latency-chart");
  if (Object.values(series).some((points) => points.length)) drawFigure(latency, latencyFigure(series));
  else charts.empty(latency, gettext("No latency recorded by this test yet."));
  const cards = data.cards || [];
  const peaks = document.getElementById("cards-chart");
  if (cards.length) drawFigure(peaks, cardsFigure(cards));
  else charts.empty(peaks, gettext("No card peak recorded by this test yet."));
})();
