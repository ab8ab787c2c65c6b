// The guided proposal form: host search as you type, and the what-if redrawn as fields change.
// Without this script the form still works: its Find host and Preview buttons post it back.
"use strict";

(function () {
  const form = document.getElementById("proposal-form");
  if (!form) return;
  const whatif = document.getElementById("whatif");
  const cards = document.getElementById("card-picker");
  const matches = document.getElementById("host-matches");
  const hostInput = form.querySelector("[name=host]");
  const kvInput = form.querySelector("[name=kv_reservation_gib]");
  const kvAdvice = document.getElementById("kv-advice");
  const DEBOUNCE_MS = 250;
  let previewTimer = null;
  let searchTimer = null;
  let latest = 0;
  let shownHost = cards.querySelector("[data-host]")?.dataset.host || "";
  form.classList.add("js");
  // A KV figure the author typed is theirs; an empty or advised one follows the advisor.
  let kvAdvised = !kvInput.value;
  kvInput.addEventListener("input", () => { kvAdvised = !kvInput.value; });

  // Pending while a preview is scheduled or in flight: the browser tests wait on it.
  const pending = (yes) => { form.dataset.pending = yes ? "1" : "0"; };

  function preview() {
    window.clearTimeout(previewTimer);
    pending(true);
    const body = new FormData(form);
    if (kvAdvised) body.delete("kv_reservation_gib");
    const ticket = ++latest;
    whatif.setAttribute("aria-busy", "true");
    fetch(form.dataset.previewUrl, { method: "POST", body, credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.json();
      })
      .then((answer) => {
        if (ticket !== latest) return; // an older answer arriving late
        whatif.innerHTML = answer.whatif;
        const host = hostInput.value.trim();
        if (host !== shownHost) {
          cards.innerHTML = answer.cards;
          shownHost = host;
        }
        if (answer.kv_recommended_gib && kvAdvised) kvInput.value = answer.kv_recommended_gib;
        kvAdvice.textContent = answer.kv_basis ? `Advisor: ${answer.kv_basis}` : "";
      })
      .catch((error) => { whatif.querySelector("h2").textContent = `What if (preview failed: ${error.message})`; })
      .finally(() => {
        if (ticket !== latest) return;
        whatif.setAttribute("aria-busy", "false");
        pending(false);
      });
  }

  function schedulePreview() {
    window.clearTimeout(previewTimer);
    pending(true);
    previewTimer = window.setTimeout(preview, DEBOUNCE_MS);
  }

  function search() {
    const url = `${form.dataset.hostSearchUrl}?q=${encodeURIComponent(hostInput.value)}`;
    fetch(url, { credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => {
        matches.innerHTML = html;
        hostInput.setAttribute("aria-expanded", "true");
      })
      .catch(() => { matches.textContent = "Host search failed; type the full name."; });
  }

  hostInput.addEventListener("input", () => {
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(search, DEBOUNCE_MS);
  });
  hostInput.addEventListener("focus", () => { if (!matches.children.length) search(); });

  matches.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-host]");
    if (!button) return;
    event.preventDefault();
    hostInput.value = button.dataset.host;
    matches.innerHTML = "";
    hostInput.setAttribute("aria-expanded", "false");
    preview();
  });

  form.addEventListener("change", (event) => {
    if (event.target === hostInput) return; // a pick or a blur of the search box previews itself
    schedulePreview();
  });
  hostInput.addEventListener("change", schedulePreview);
  form.addEventListener("input", (event) => {
    if (event.target.matches("input[type=number], input[type=text]:not([name=host])")) schedulePreview();
  });
  document.getElementById("preview-button").addEventListener("click", (event) => {
    event.preventDefault();
    preview();
  });
  form.addEventListener("submit", () => { window.clearTimeout(previewTimer); });
  pending(false);
  if (hostInput.value) preview();
})();
