// One host's OOM history: its latency across the same changes, the other half of the result.
"use strict";

(function () {
  const charts = window.consoleCharts;
  const zone = document.getElementById("oom-latency-script").dataset.timeZone;
  charts.drawLatency(document.getElementById("latency-chart"), charts.readJson("latency-data"), zone);
})();
