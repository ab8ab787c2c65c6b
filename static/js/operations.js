// The host operations page: fragmentation before and after each off-peak reload.
(function () {
  const data = document.getElementById("fragmentation-figure");
  if (!data || typeof Plotly === "undefined") return;
  const figure = JSON.parse(JSON.parse(data.textContent));
  Plotly.newPlot("fragmentation-chart", figure.data, figure.layout, {displaylogo: false, responsive: true});
})();
