// Shared plotly settings for the console's charts: local plotly.js, no mode bar clutter.
// Every chart comes with its text table: the figure function that builds a chart's traces
// from the page's data builds the table's rows from the same data, and `draw` puts the table
// in a <details> right after the chart, for screen readers and for reading exact figures.
"use strict";

window.consoleCharts = (function () {
  const config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const layout = (extra) => Object.assign({
    margin: { l: 60, r: 20, t: 10, b: 40 },
    font: { family: "system-ui, sans-serif", size: 12 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
  }, extra || {});

  // A figure's number as its table shows it: fixed decimals, a dash for a gap.
  function number(value, digits) {
    return value === null || value === undefined ? "—" : Number(value).toFixed(digits);
  }

  function tableFor(element) {
    const id = `${element.id}-table`;
    let details = document.getElementById(id);
    if (!details) {
      details = document.createElement("details");
      details.id = id;
      details.className = "chart-table";
      details.dataset.testid = id;
      element.insertAdjacentElement("afterend", details);
    }
    return details;
  }

  // table: {caption, columns: [{label, numeric}], rows: [[cell, ...]]}
  function drawTable(element, table) {
    const details = tableFor(element);
    const summary = document.createElement("summary");
    summary.textContent = gettext("The chart's figures as a table");
    const node = document.createElement("table");
    node.className = "data small";
    const caption = node.createCaption();
    caption.textContent = table.caption;
    const head = node.createTHead().insertRow();
    table.columns.forEach((column) => {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = column.label;
      if (column.numeric) th.className = "num";
      head.appendChild(th);
    });
    const body = node.createTBody();
    table.rows.forEach((row) => {
      const tr = body.insertRow();
      row.forEach((text, i) => {
        const td = tr.insertCell();
        td.textContent = text;
        if (table.columns[i].numeric) td.className = "num";
      });
    });
    details.replaceChildren(summary, node);
  }

  function draw(element, traces, extraLayout, table) {
    if (!element) return;
    if (table) drawTable(element, table);
    if (typeof Plotly === "undefined") {
      element.textContent = gettext("The chart library did not load; the table below holds the same figures.");
      return;
    }
    Plotly.react(element, traces, layout(extraLayout), config);
  }

  function empty(element, message) {
    if (!element) return;
    if (typeof Plotly !== "undefined") Plotly.purge(element);
    const stale = document.getElementById(`${element.id}-table`);
    if (stale) stale.remove();
    element.innerHTML = "";
    const note = document.createElement("p");
    note.className = "empty";
    note.textContent = message;
    element.appendChild(note);
  }

  function readJson(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  // The latency history (host page, model page, one host's OOM history): P50, P95 and P99
  // per line against its SLO, placement changes as dotted lines with a hover marker each.
  function latencyFigure(latency, zone) {
    const traces = [];
    const rows = [];
    latency.lines.forEach((line) => {
      const name = (quantile) => `${line.model} ${quantile}`;
      traces.push({ type: "scatter", mode: "lines", name: name("P99"), x: line.times, y: line.p99_ms });
      traces.push({ type: "scatter", mode: "lines", name: name("P95"), x: line.times, y: line.p95_ms, line: { width: 1 } });
      traces.push({ type: "scatter", mode: "lines", name: name("P50"), x: line.times, y: line.p50_ms, line: { width: 1, dash: "dot" } });
      if (line.slo_ms) {
        traces.push({ type: "scatter", mode: "lines", name: name("SLO"), x: [line.times[0], line.times[line.times.length - 1]],
                      y: [line.slo_ms, line.slo_ms], line: { dash: "dash", width: 1 } });
      }
      line.times.forEach((at, i) => {
        rows.push([at, line.model, number(line.p50_ms[i], 1), number(line.p95_ms[i], 1),
                   number(line.p99_ms[i], 1), line.slo_ms ? String(line.slo_ms) : "—"]);
      });
    });
    latency.changes.forEach((change) => {
      rows.push([change.at, interpolate(gettext("change on %s by %s: %s"), [change.host, change.by, change.label]),
                 "", "", "", ""]);
    });
    rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    if (latency.changes.length) {
      traces.push({
        type: "scatter", mode: "markers", name: gettext("Placement change"), yaxis: "y2",
        x: latency.changes.map((change) => change.at), y: latency.changes.map(() => 1),
        marker: { symbol: "triangle-down", size: 11, color: "#57606a" }, hoverinfo: "text",
        hovertext: latency.changes.map((change) => `${change.host} · ${change.by}<br>${change.label}`),
      });
    }
    const shapes = latency.changes.map((change) => ({
      type: "line", xref: "x", yref: "paper", x0: change.at, x1: change.at, y0: 0, y1: 1,
      line: { dash: "dot", width: 1, color: "#57606a" },
    }));
    return {
      traces,
      layout: { height: 340, shapes, xaxis: { title: { text: interpolate(gettext("time (%s)"), [zone]) } },
                yaxis: { title: { text: "ms" } },
                yaxis2: { overlaying: "y", range: [0, 1.05], visible: false, fixedrange: true },
                legend: { orientation: "h", y: -0.3 }, margin: { l: 60, r: 20, t: 10, b: 100 } },
      table: {
        caption: gettext("Latency per step (ms, worst in the step) and the placement changes"),
        columns: [{ label: interpolate(gettext("time (%s)"), [zone]) }, { label: gettext("Line") },
                  { label: "P50", numeric: true }, { label: "P95", numeric: true },
                  { label: "P99", numeric: true }, { label: "SLO", numeric: true }],
        rows,
      },
    };
  }

  function drawLatency(element, latency, zone) {
    if (!element) return;
    if (!latency || !latency.lines.length) return empty(element, gettext("No engine latency in this window yet."));
    const figure = latencyFigure(latency, zone);
    draw(element, figure.traces, figure.layout, figure.table);
  }

  return { draw, drawTable, empty, readJson, number, latencyFigure, drawLatency };
})();
