// The evaluation page: poll the progress answer (with its ETag: an unchanged answer is a
// bodyless 304) and update the state, the bar, the count and the estimate in place; reload
// once the evaluation is over, so that its results and runs appear. A coarse answer (held-out
// data, non-admins) moves only at a tick of the progress clock or at the end: then the page
// reloads, so that its sentences are the server's. Without scripts the page refreshes itself
// every minute (a <noscript> meta refresh) and offers a link.
"use strict";
(function () {
  const box = document.getElementById("live-progress");
  if (!box || box.dataset.finished === "true") return;
  const url = box.dataset.progressUrl;
  const coarse = box.dataset.coarse === "true";
  // What the page shows of a coarse answer: when a poll says otherwise, a tick has passed.
  function shownKey(p) {
    return p.status + "|" + p.recordings_done + "|" + (p.as_of ? Date.parse(p.as_of) / 1000 : "");
  }
  const note = document.getElementById("live-note");
  const intervalMs = 5000;
  let etag = null;
  let last = null;

  function field(name) { return document.querySelector('[data-field="' + name + '"]'); }
  function text(el, value) { if (el && el.textContent !== value) el.textContent = value; }
  // As the server's duration(): rounded, as an estimate should be.
  function duration(seconds) {
    const total = Math.round(seconds);
    if (total < 90) return total + " s";
    const minutes = Math.round(total / 60);
    if (minutes < 90) return minutes + " min";
    return Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
  }
  function outcomes(counts) {
    return Object.keys(counts || {}).sort()
      .map((k) => k.replace(/_/g, " ") + ": " + counts[k]).join(", ");
  }

  function show(p) {
    const state = field("state");
    text(state, p.state);
    if (state) state.className = "badge status-" + p.state;
    const bar = field("bar");
    if (bar) { bar.max = Math.max(1, p.recordings_total); bar.value = p.recordings_done; }
    text(field("count"), p.recordings_done + " / " + p.recordings_total + " recordings" +
      (p.state === "scoring" ? ", all run; computing the scores." : "."));
    text(field("outcomes"), outcomes(p.outcomes));
    const asOf = field("as-of");
    if (asOf && p.as_of) {
      asOf.setAttribute("datetime", p.as_of);
      text(asOf, p.as_of.slice(11, 16));
    }
    const held = field("held-by");
    if (held) { held.hidden = !p.held_by; text(held, p.held_by ? "Held by a platform fault: " + p.held_by : ""); }
    const eta = field("eta");
    if (eta) {
      // From the finish moment, so that an unchanged answer (304) still counts down.
      const left = p.estimated_finish_at ? Math.max(0, (Date.parse(p.estimated_finish_at) - Date.now()) / 1000) : null;
      eta.hidden = left === null;
      text(eta, left !== null ? "About " + duration(left) + " left: an estimate from the " + p.estimate_basis + "." : "");
    }
  }

  function schedule() { window.setTimeout(poll, intervalMs); }

  async function poll() {
    let response;
    try {
      const headers = { Accept: "application/json" };
      if (etag) headers["If-None-Match"] = etag;
      response = await fetch(url, { credentials: "same-origin", headers: headers, cache: "no-store" });
    } catch (e) {
      text(note, "Live updates paused: the server did not answer; retrying.");
      return schedule();
    }
    if (response.status === 304) { if (last) show(last); return schedule(); }
    if (!response.ok) { text(note, "Live updates stopped (" + response.status + "): reload the page."); return; }
    etag = response.headers.get("ETag");
    const p = await response.json();
    if (["done", "failed", "cancelled"].includes(p.status)) { window.location.reload(); return; }
    if (coarse) {
      if (shownKey(p) !== box.dataset.shown) { window.location.reload(); return; }
      text(note, "Updating at each tick of the progress clock.");
      return schedule();
    }
    last = p;
    show(p);
    text(note, "Updating live.");
    schedule();
  }

  text(note, coarse ? "Updating at each tick of the progress clock." : "Updating live.");
  schedule();
})();
