// Shared plotly settings for the console's charts: local plotly.js, no mode bar clutter.
"use strict";

window.consoleCharts = (function () {
  const config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const layout = (extra) => Object.assign({
    margin: { l: 60, r: 20, t: 10, b: 40 },
    font: { family: "system-ui, sans-serif", size: 12 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
  }, extra || {});

  function draw(element, traces, extraLayout) {
    if (!element) return;
    Plotly.react(element, traces, layout(extraLayout), config);
  }

  function empty(element, message) {
    if (!element) return;
    Plotly.purge(element);
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

  return { draw, empty, readJson };
})();
