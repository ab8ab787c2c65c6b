// The model page: its latency history per host, from the data the page embeds.
"use strict";

(function () {
  const charts = window.consoleCharts;
  const zone = document.getElementById("model-script").dataset.timeZone;
  charts.drawLatency(document.getElementById("latency-chart"), charts.readJson("latency-data"), zone);
})();
