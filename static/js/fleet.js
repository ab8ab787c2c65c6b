// The fleet board refreshes its rows every 15 s, and pauses while the tab is hidden.
"use strict";

(function () {
  const PERIOD_MS = 15000;
  const rows = document.getElementById("fleet-rows");
  const state = document.getElementById("refresh-state");
  let timer = null;
  let lastHtml = null;

  function url() {
    const params = new URLSearchParams(window.location.search);
    params.set("partial", "1");
    return `${window.location.pathname}?${params}`;
  }

  function refresh() {
    fetch(url(), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then((response) => {
        if (response.redirected || !response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => {
        // Rows that did not change are left alone (no reflow, no lost focus).
        if (html !== lastHtml) rows.innerHTML = html;
        lastHtml = html;
        state.textContent = interpolate(gettext("Updated %s; refreshes every 15 s."), [new Date().toLocaleTimeString()]);
      })
      .catch((error) => { state.textContent = interpolate(gettext("Refresh failed (%s); retrying."), [error.message]); });
  }

  function start() {
    if (timer === null) timer = window.setInterval(refresh, PERIOD_MS);
  }

  function stop() {
    window.clearInterval(timer);
    timer = null;
    state.textContent = gettext("Paused while the tab is hidden.");
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      stop();
    } else {
      refresh();
      start();
    }
  });
  start();
})();
