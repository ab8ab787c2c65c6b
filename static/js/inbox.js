// The approver's inbox polls its own rows every 10 s (paused while the tab is hidden), so a
// proposal that passes its gates appears without a reload.
"use strict";

(function () {
  const PERIOD_MS = 10000;
  const table = document.getElementById("inbox-table");
  const body = table.querySelector("tbody");
  const state = document.getElementById("inbox-refresh");
  const shown = () => new Set([...body.querySelectorAll("tr[data-proposal]")].map((row) => row.dataset.proposal));

  function refresh() {
    if (document.hidden) return;
    const before = shown();
    fetch(table.dataset.pollUrl, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then((response) => {
        if (response.redirected || !response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => {
        body.innerHTML = html;
        const arrived = [...shown()].filter((pk) => !before.has(pk));
        for (const pk of arrived) body.querySelector(`tr[data-proposal="${pk}"]`).classList.add("arrived");
        const when = new Date().toLocaleTimeString([], { timeZoneName: "short" });
        state.textContent = arrived.length
          ? `${arrived.length} new since the last look (${when}).`
          : `Up to date at ${when}; refreshes every 10 s.`;
      })
      .catch((error) => { state.textContent = `Refresh failed (${error.message}); retrying.`; });
  }

  window.setInterval(refresh, PERIOD_MS);
  document.addEventListener("visibilitychange", refresh);
})();
