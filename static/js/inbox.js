// The approver's inbox polls the rows of each of its tables every 10 s (paused while the tab
// is hidden): what waits, and what failed its checks. A proposal that passes its gates, or
// fails them, appears without a reload.
"use strict";

(function () {
  const PERIOD_MS = 10000;
  const tables = [...document.querySelectorAll("table[data-poll-url]")];
  const state = document.getElementById("inbox-refresh");
  const shown = (body) => new Set([...body.querySelectorAll("tr[data-proposal]")].map((row) => row.dataset.proposal));

  // Swaps in one table's rows and marks those that were not there; resolves to their count.
  function refreshTable(table) {
    const body = table.querySelector("tbody");
    const before = shown(body);
    return fetch(table.dataset.pollUrl, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then((response) => {
        if (response.redirected || !response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => {
        body.innerHTML = html;
        const arrived = [...shown(body)].filter((pk) => !before.has(pk));
        for (const pk of arrived) {
          for (const row of body.querySelectorAll(`tr[data-proposal="${pk}"]`)) row.classList.add("arrived");
        }
        return arrived.length;
      });
  }

  function refresh() {
    if (document.hidden) return;
    Promise.all(tables.map(refreshTable))
      .then((counts) => {
        const arrived = counts.reduce((sum, count) => sum + count, 0);
        const when = new Date().toLocaleTimeString([], { timeZoneName: "short" });
        state.textContent = arrived
          ? interpolate(gettext("%(count)s new since the last look (%(when)s)."), { count: arrived, when: when }, true)
          : interpolate(gettext("Up to date at %s; refreshes every 10 s."), [when]);
      })
      .catch((error) => { state.textContent = interpolate(gettext("Refresh failed (%s); retrying."), [error.message]); });
  }

  window.setInterval(refresh, PERIOD_MS);
  document.addEventListener("visibilitychange", refresh);
})();
