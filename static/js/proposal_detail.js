// A proposal's page follows its state: while the gates run it polls every 2 s and marks each
// gate as it finishes; when the state moves on (checked, decided, applied) the page's content
// is fetched again and swapped in, so nobody reloads by hand.
"use strict";

(function () {
  const live = document.getElementById("proposal-live");
  if (!live) return;
  const FAST_MS = 2000;
  const SLOW_MS = 15000;
  let version = live.dataset.version;
  let timer = null;

  function schedule(running) {
    window.clearTimeout(timer);
    timer = window.setTimeout(poll, running ? FAST_MS : SLOW_MS);
  }

  function showProgress(gates) {
    for (const gate of gates) {
      const item = document.querySelector(`#gate-progress li[data-gate="${gate.gate}"] .verdict`);
      if (!item) continue;
      item.textContent = gate.status;
      item.className = `verdict verdict-${gate.status === "n/a" ? "na" : gate.status}`;
    }
  }

  function swapPage() {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => {
        const fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main.page");
        const typing = document.activeElement && document.activeElement.matches("textarea, input[type=text]");
        if (!fresh || typing) return false; // keep what is being typed; try again next poll
        document.querySelector("main.page").replaceWith(fresh);
        return true;
      });
  }

  function poll() {
    if (document.hidden) return schedule(false);
    fetch(live.dataset.statusUrl, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then((response) => {
        if (response.redirected || !response.ok) throw new Error(`HTTP ${response.status}`);
        return response.json();
      })
      .then((status) => {
        showProgress(status.gates);
        if (status.version !== version) {
          return swapPage().then((swapped) => {
            if (swapped) version = status.version;
            schedule(status.running);
          });
        }
        schedule(status.running);
      })
      .catch(() => schedule(false));
  }

  schedule(live.dataset.running === "1");
})();
