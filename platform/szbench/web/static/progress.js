// My submissions: poll a small JSON endpoint and update statuses and progress in place.
// When versions or evaluations appear (a smoke test queued held-out runs), the list is
// re-fetched as an HTML fragment. Polling stops while nothing is in progress for a while.
"use strict";
(function () {
  const root = document.getElementById("submissions");
  if (!root) return;
  const live = document.getElementById("live-status");
  const progressUrl = root.dataset.progressUrl;
  const fragmentUrl = root.dataset.fragmentUrl;
  const intervalMs = 2000;
  let idleRounds = 0;

  function text(el, value) { if (el && el.textContent !== value) el.textContent = value; }
  function outcomes(counts) {
    const keys = Object.keys(counts || {}).sort();
    return keys.length ? keys.map((k) => k.replace(/_/g, " ") + ": " + counts[k]).join(", ") : "—";
  }
  function idsOnPage(selector, attribute) {
    return Array.from(root.querySelectorAll(selector)).map((el) => el.getAttribute(attribute)).sort().join(",");
  }

  async function refreshList() {
    const response = await fetch(fragmentUrl, { credentials: "same-origin" });
    // Signed out meanwhile: the answer is the sign-in page, not the list.
    if (!response.ok || response.redirected) return;
    const html = await response.text();
    const focused = document.activeElement && document.activeElement.id;
    root.innerHTML = html;
    if (focused) { const el = document.getElementById(focused); if (el) el.focus(); }
  }

  async function poll() {
    let data;
    try {
      const response = await fetch(progressUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) { text(live, "Live updates paused (" + response.status + ")."); return; }
      data = await response.json();
    } catch (e) {
      text(live, "Live updates paused: the server did not answer.");
      return schedule();
    }
    const versionIds = data.versions.map((v) => String(v.id)).sort().join(",");
    const evaluationIds = data.evaluations.map((e) => String(e.id)).sort().join(",");
    if (versionIds !== idsOnPage("[data-version-id]", "data-version-id") ||
        evaluationIds !== idsOnPage("[data-evaluation-id]", "data-evaluation-id")) {
      await refreshList();
    } else {
      for (const v of data.versions) {
        const el = root.querySelector('[data-version-id="' + v.id + '"]');
        if (!el) continue;
        const badge = el.querySelector('[data-field="version-status"]');
        text(badge, v.status.replace(/_/g, " "));
        if (badge) badge.className = "badge status-" + v.status;
        text(el.querySelector('[data-field="version-message"]'), v.status_message || "waiting");
      }
      let finishedNow = false;
      for (const e of data.evaluations) {
        const row = root.querySelector('[data-evaluation-id="' + e.id + '"]');
        if (!row) continue;
        const badge = row.querySelector('[data-field="status"]');
        text(badge, e.status);
        if (badge) badge.className = "badge status-" + e.status;
        const bar = row.querySelector('[data-field="progress"]');
        if (bar) { bar.max = Math.max(1, e.recordings_total); bar.value = e.recordings_done; }
        // On held-out data the count is a range (coarse steps): as the server writes it.
        const most = e.recordings_done_at_most;
        text(row.querySelector('[data-field="progress-text"]'),
          (most > e.recordings_done ? e.recordings_done + "–" + most : e.recordings_done) + " / " + e.recordings_total);
        text(row.querySelector('[data-field="outcomes"]'), outcomes(e.outcomes));
        text(row.querySelector('[data-field="message"]'), e.message || "");
        // Every recording ran: the scores are being computed and there is nothing to cancel.
        const cancel = row.querySelector('form[action$="/cancel"]');
        if (cancel && e.status === "scoring") cancel.hidden = true;
        if (e.finished && row.dataset.finished !== "true") finishedNow = true;
      }
      // Finished rows get other buttons (re-run instead of cancel): redraw once.
      if (finishedNow) await refreshList();
    }
    const busy = data.evaluations.some((e) => !e.finished) ||
      data.versions.some((v) => v.status === "pending" || v.status === "smoke_testing");
    idleRounds = busy ? 0 : idleRounds + 1;
    text(live, busy ? "Updating live…" : "Everything is finished.");
    schedule();
  }

  function schedule() {
    // Keep listening a little after the last change: a smoke test queues new evaluations.
    if (idleRounds < 5) setTimeout(poll, intervalMs);
  }
  setTimeout(poll, intervalMs);
})();
