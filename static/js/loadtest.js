// Live progress of a combined load test: polls its status.json until it has finished.
(function () {
  const box = document.getElementById("load-test-status");
  if (!box || box.dataset.finished === "true") return;
  const url = box.dataset.statusUrl;
  const gib = (bytes) => (bytes == null ? "—" : (bytes / 1024 ** 3).toFixed(1) + " GiB");
  const cell = (text, num) => {
    const td = document.createElement("td");
    if (num) td.className = "num";
    td.textContent = text;
    return td;
  };
  const rows = (body, items, columns) => {
    body.replaceChildren(
      ...items.map((item) => {
        const tr = document.createElement("tr");
        columns.forEach(([get, num]) => tr.appendChild(cell(get(item), num)));
        return tr;
      })
    );
  };
  async function poll() {
    if (document.hidden) return setTimeout(poll, 2000);
    let data;
    try {
      const answer = await fetch(url, { headers: { Accept: "application/json" } });
      if (!answer.ok) return setTimeout(poll, 5000);
      data = await answer.json();
    } catch (error) {
      return setTimeout(poll, 5000);
    }
    const progress = data.progress || {};
    box.querySelector('[data-field="status"]').textContent = data.status;
    const phase = box.querySelector('[data-field="phase"]');
    if (phase) phase.textContent = progress.phase || "";
    rows(box.querySelector('[data-field="models"]'), progress.models || [], [
      [(m) => m.model], [(m) => m.sent, true], [(m) => m.completed, true],
      [(m) => m.failed, true],
      [(m) => (m.p99_e2e_ms == null ? "—" : Math.round(m.p99_e2e_ms) + " ms"), true],
    ]);
    rows(box.querySelector('[data-field="cards"]'), progress.cards || [], [
      [(c) => c.card], [(c) => gib(c.peak_bytes), true], [(c) => gib(c.bound_bytes), true],
    ]);
    if (data.finished) {
      box.dataset.finished = "true";
      window.location.reload();
      return;
    }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
})();
