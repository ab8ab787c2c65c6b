// The OOM history charts, drawn from the data the page embeds with json_script.
// The page leaves a chart out (and says "No OOMs in this window") when there is nothing to draw.
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("oom-history-data").textContent);
  const WEEK_MS = 7 * 24 * 3600 * 1000;
  // Okabe-Ito, colour-blind safe; a cause keeps its colour whatever the filters.
  const CAUSE_COLOURS = {
    true_peak: "#D55E00",
    allocator_reserve: "#E69F00",
    fragmentation: "#0072B2",
    insufficient_data: "#999999",
  };
  const UNTRIAGED_COLOUR = "#CC79A7";
  const CHANGE_COLOUR = "#57606a";
  // Bars and points sit in the middle of their ISO week, so a change line falls inside the
  // week it landed in.
  const weekPeriod = {xperiod: WEEK_MS, xperiod0: data.weeks[0], xperiodalignment: "middle"};
  const windowEnd = new Date(Date.parse(data.weeks[data.weeks.length - 1]) + WEEK_MS);

  function escapeText(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function changeLines() {
    return data.changes.map((change) => ({
      type: "line",
      xref: "x",
      yref: "paper",
      x0: change.at,
      x1: change.at,
      y0: 0,
      y1: 1,
      line: {color: CHANGE_COLOUR, width: 1.5, dash: "dot"},
    }));
  }

  // Shapes take no hover, so a marker on top of each line carries who changed what.
  function changeMarkers() {
    return {
      type: "scatter",
      mode: "markers",
      name: gettext("Placement or isolation change"),
      x: data.changes.map((change) => change.at),
      y: data.changes.map(() => 1),
      yaxis: "y2",
      marker: {symbol: "triangle-down", size: 12, color: CHANGE_COLOUR},
      hovertext: data.changes.map((change) =>
        [
          `<b>${escapeText(change.host)}</b> ${escapeText(change.at.slice(0, 16))} UTC`,
          interpolate(gettext("by %s"), [escapeText(change.who)]),
          ...change.what.map(escapeText),
        ].join("<br>"),
      ),
      hoverinfo: "text",
    };
  }

  function layout(extra) {
    return {
      height: 380,
      margin: {t: 10, r: 10, b: 90, l: 55},
      // The weeks are UTC weeks (the page says so), whatever the reader's zone.
      xaxis: {
        type: "date",
        range: [data.weeks[0], windowEnd.toISOString()],
        title: {text: gettext("week (from Monday 00:00 UTC)")},
      },
      yaxis: {title: {text: gettext("OOMs per week")}, rangemode: "tozero", fixedrange: true},
      yaxis2: {overlaying: "y", range: [0, 1.05], visible: false, fixedrange: true},
      shapes: changeLines(),
      legend: {orientation: "h", y: -0.3},
      hovermode: "closest",
      ...extra,
    };
  }

  function weekHover(name) {
    return `${escapeText(name)}: %{y}<extra>${gettext("week of")} %{customdata}</extra>`;
  }

  function draw(elementId, traces, extraLayout) {
    const element = document.getElementById(elementId);
    if (!element) {
      return;
    }
    if (typeof Plotly === "undefined") {
      element.textContent = gettext("The chart library did not load; the table below holds the same counts.");
      return;
    }
    element.textContent = "";
    const markers = data.changes.length ? [changeMarkers()] : [];
    Plotly.newPlot(element, [...traces, ...markers], layout(extraLayout), {
      displaylogo: false,
      responsive: true,
    });
  }

  draw(
    "chart-by-cause",
    data.causes.map((cause) => ({
      type: "bar",
      name: cause.name,
      x: data.weeks,
      y: cause.counts,
      customdata: data.weeks,
      marker: {color: CAUSE_COLOURS[cause.key] || UNTRIAGED_COLOUR},
      hovertemplate: weekHover(cause.name),
      ...weekPeriod,
    })),
    {barmode: "stack", bargap: 0.15},
  );

  draw(
    "chart-by-host",
    data.hosts.map((host) => ({
      type: "scatter",
      mode: "lines+markers",
      name: host.name,
      x: data.weeks,
      y: host.counts,
      customdata: data.weeks,
      hovertemplate: weekHover(host.name),
      ...weekPeriod,
    })),
    {},
  );
})();
