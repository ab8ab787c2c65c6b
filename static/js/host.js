// The host page: ledger bars, history heatmaps and lines per window, analyses loaded late.
"use strict";

(function () {
  const charts = window.consoleCharts;
  const GIB = 1024 ** 3;
  const script = document.getElementById("host-script");
  const chartsUrl = script.dataset.chartsUrl;

  const KIND_COLOURS = {
    driver_reserved: "#57606a", model_weights: "#0072B2", kv_cache_used: "#E69F00",
    kv_cache_reserved_unused: "#F0E442", kv_cache_use_unknown: "#DDCC77",
    workspace_activations: "#56B4E9", cuda_graphs: "#332288", communication_buffers: "#44AA99",
    allocator_reserve: "#CC79A7", fragmentation: "#D55E00", unattributed: "#999999",
    cuda_context: "#882255",
    free: "#dafbe1",
  };

  // Each kind's name as the reader's language says it (the kind itself stays the key).
  const KIND_LABELS = {
    driver_reserved: gettext("driver reserved"), model_weights: gettext("model weights"),
    kv_cache_used: gettext("kv cache used"), kv_cache_reserved_unused: gettext("kv cache reserved unused"),
    kv_cache_use_unknown: gettext("kv cache use unknown"), workspace_activations: gettext("workspace activations"),
    cuda_graphs: gettext("cuda graphs"), communication_buffers: gettext("communication buffers"),
    allocator_reserve: gettext("allocator reserve"), fragmentation: gettext("fragmentation"),
    unattributed: gettext("unattributed"), free: gettext("free"),
  };
  const kindLabel = (kind) => KIND_LABELS[kind] || kind.replace(/_/g, " ");

  function drawLedger() {
    const cards = charts.readJson("ledger-data") || [];
    const element = document.getElementById("ledger-chart");
    if (!cards.length) return charts.empty(element, gettext("No cards."));
    // One trace per kind and basis, so estimated figures can be hatched.
    const traces = {};
    const rows = [];
    cards.forEach((card) => {
      card.lines.forEach((line) => {
        const key = line.kind + "|" + line.basis;
        const name = kindLabel(line.kind) + (line.basis === "estimated" ? " " + gettext("(est.)") : "");
        const trace = traces[key] || (traces[key] = {
          type: "bar", name,
          x: [], y: [], text: [], textposition: "none", hovertemplate: "%{x}<br>%{text}<extra></extra>",
          marker: { color: KIND_COLOURS[line.kind] || "#888",
                    pattern: { shape: line.basis === "estimated" ? "/" : "" } },
        });
        trace.x.push(card.card);
        trace.y.push(line.bytes / GIB);
        trace.text.push(`${kindLabel(line.kind)}${line.deployment ? " · " + line.deployment : ""}: ` +
                        `${(line.bytes / GIB).toFixed(2)} GiB, ${line.basis} (${line.source})`);
        rows.push([card.card, name, line.deployment || "—", charts.number(line.bytes / GIB, 2), line.basis, line.source]);
      });
    });
    charts.draw(element, Object.values(traces), {
      barmode: "stack", height: 360, yaxis: { title: { text: "GiB" } },
      legend: { orientation: "h", y: -0.2 }, margin: { l: 60, r: 20, t: 10, b: 100 },
    }, {
      caption: gettext("Each card's memory by kind (GiB)"),
      columns: [{ label: gettext("Card") }, { label: gettext("Kind") }, { label: gettext("Deployment") },
                { label: "GiB", numeric: true }, { label: gettext("Basis") }, { label: gettext("Source") }],
      rows,
    });
  }

  function heatmap(element, data, values, title, zmax, digits) {
    if (!data.times.length) return charts.empty(element, gettext("No samples in this window yet."));
    const axis = interpolate(gettext("time (%s)"), [data.time_zone]);
    const rows = [];
    data.times.forEach((at, j) => {
      data.cards.forEach((card, i) => rows.push([at, card, charts.number(values[i][j], digits)]));
    });
    charts.draw(element, [{
      type: "heatmap", x: data.times, y: data.cards, z: values, zmin: 0, zmax: zmax,
      colorscale: "YlOrRd", colorbar: { title: { text: title }, thickness: 12 }, hoverongaps: false,
    }], { height: 60 + 28 * data.cards.length, yaxis: { autorange: "reversed" },
           xaxis: { title: { text: axis } } }, {
      caption: element.dataset.caption,
      columns: [{ label: axis }, { label: gettext("Card") }, { label: title, numeric: true }],
      rows,
    });
  }

  function deploymentLines(element, data) {
    if (!data.deployments.length) return charts.empty(element, gettext("No deployment memory in this window yet."));
    const axis = interpolate(gettext("time (%s)"), [data.time_zone]);
    const rows = [];
    data.deployments.forEach((line) => {
      line.times.forEach((at, i) => rows.push([at, line.label, charts.number(line.used_gib[i], 2)]));
    });
    charts.draw(element, data.deployments.map((line) => ({
      type: "scatter", mode: "lines", name: line.label, x: line.times, y: line.used_gib,
    })), { height: 320, yaxis: { title: { text: "GiB" } }, xaxis: { title: { text: axis } },
           legend: { orientation: "h", y: -0.25 },
           margin: { l: 60, r: 20, t: 10, b: 90 } }, {
      caption: gettext("Memory per deployment and card (GiB, peak per step)"),
      columns: [{ label: axis }, { label: gettext("Deployment and card") }, { label: "GiB", numeric: true }],
      rows,
    });
  }

  function drawHistory(window) {
    fetch(`${chartsUrl}?window=${encodeURIComponent(window)}`, { credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`charts: HTTP ${response.status}`);
        return response.json();
      })
      .then((data) => {
        drawLatency(data);
        heatmap(document.getElementById("heatmap-used"), data, data.used_pct, "%", 100, 1);
        heatmap(document.getElementById("heatmap-frag"), data, data.fragmentation, gettext("index"), 1, 3);
        deploymentLines(document.getElementById("deployment-lines"), data);
      })
      .catch((error) => {
        charts.empty(document.getElementById("heatmap-used"), error.message);
      });
  }

  function cell(text, numeric) {
    const td = document.createElement("td");
    if (numeric) td.className = "num";
    td.textContent = text;
    return td;
  }

  function drawLatency(data) {
    const body = document.querySelector("#latency-table tbody");
    const latency = data.latency;
    body.replaceChildren();
    charts.drawLatency(document.getElementById("latency-chart"), latency, data.time_zone);
    if (!latency || !latency.lines.length) {
      body.appendChild(document.createElement("tr")).appendChild(cell(gettext("No engine latency in this window."))).colSpan = 4;
      return;
    }
    const ms = (value) => (value === null ? "—" : `${Math.round(value)} ms`);
    latency.lines.forEach((line) => {
      const row = body.appendChild(document.createElement("tr"));
      row.append(cell(line.model), cell(line.slo_ms ? `${line.slo_ms} ms` : "—", true), cell(ms(line.before_ms), true), cell(ms(line.after_ms), true));
    });
  }

  function drawOoms() {
    const points = charts.readJson("oom-data");
    const element = document.getElementById("oom-chart");
    if (!points || !element) return;
    const byCause = {};
    const rows = [];
    points.forEach((p) => {
      const name = p.label || p.cause.replace(/_/g, " ");
      const trace = byCause[p.cause] || (byCause[p.cause] = {
        type: "scatter", mode: "markers", name, x: [], y: [], text: [],
        hovertemplate: "%{x}<br>" + gettext("card") + " %{y}<br>%{text}<extra></extra>", marker: { size: 9 },
      });
      trace.x.push(p.at); trace.y.push(p.card); trace.text.push(p.text);
      rows.push([p.at, p.card === null ? "—" : String(p.card), name, p.text || ""]);
    });
    charts.draw(element, Object.values(byCause), { height: 200, yaxis: { title: { text: gettext("card") }, dtick: 1 } }, {
      caption: gettext("OOMs, last 30 days"),
      columns: [{ label: gettext("When") }, { label: gettext("Card"), numeric: true }, { label: gettext("Cause") }, { label: gettext("Why") }],
      rows,
    });
  }

  function loadAnalysis() {
    const section = document.getElementById("analysis");
    fetch(section.dataset.url, { credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => { section.innerHTML = html; })
      .catch((error) => { section.querySelector("p").textContent = interpolate(gettext("Could not load: %s"), [error.message]); });
  }

  document.querySelectorAll(".window-picker button").forEach((button) => {
    button.addEventListener("click", () => {
      document.querySelectorAll(".window-picker button").forEach((b) => {
        b.classList.remove("active");
        b.setAttribute("aria-pressed", "false");
      });
      button.classList.add("active");
      button.setAttribute("aria-pressed", "true");
      drawHistory(button.dataset.window);
    });
  });

  drawLedger();
  drawOoms();
  drawHistory("24h");
  loadAnalysis();
})();
