// The demo's history backfill, shown as it goes: every 3 s the bars move; once it is written
// the board shows itself again with the history in.
"use strict";

(function () {
  const panel = document.getElementById("demo-progress");
  if (!panel) return;
  function poll() {
    fetch(panel.dataset.url, { credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : null))
      .then((state) => {
        if (!state || !state.hosts) return window.setTimeout(poll, 3000);
        for (const [host, done] of Object.entries(state.hosts)) {
          const bar = panel.querySelector(`li[data-host="${host}"] progress`);
          if (bar) { bar.value = done; bar.textContent = done.toFixed(2); }
        }
        if (state.finished) window.location.reload();
        else window.setTimeout(poll, 3000);
      })
      .catch(() => window.setTimeout(poll, 10000));
  }
  window.setTimeout(poll, 3000);
})();
