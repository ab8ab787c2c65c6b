// First login: the console takes the browser's time zone until the user picks one, then shows
// the page again in it.
"use strict";

(function () {
  const marker = document.getElementById("browser-time-zone");
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!marker || !zone) return;
  const body = new URLSearchParams({ time_zone: zone });
  fetch(marker.dataset.url, {
    method: "POST",
    body,
    credentials: "same-origin",
    headers: { "X-CSRFToken": marker.dataset.csrf },
  })
    .then((response) => (response.ok ? response.json() : null))
    .then((answer) => { if (answer && answer.changed) window.location.reload(); })
    .catch(() => {});
})();
