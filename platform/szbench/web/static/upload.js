// Submit page: create the algorithm if new, upload the image archive in chunks through the
// API's resumable upload sessions, then submit the version. After a dropped connection the
// upload asks the server for its offset and goes on from there (also after a page reload:
// the session id is kept in localStorage per file).
"use strict";
(function () {
  const form = document.getElementById("submit-form");
  if (!form) return;
  // Hidden in the page itself, so that without JavaScript only the notice shows.
  form.hidden = false;
  const needsJs = document.getElementById("needs-javascript");
  if (needsJs) needsJs.hidden = true;
  const chunkBytes = Number(form.dataset.chunkBytes) || 8 * 1024 * 1024;
  const maxBytes = Number(form.dataset.maxBytes) || Infinity;
  const algorithmSelect = document.getElementById("algorithm-id");
  const newAlgorithm = document.getElementById("new-algorithm");
  const fileInput = document.getElementById("file");
  const dropZone = document.getElementById("drop-zone");
  const fileName = document.getElementById("file-name");
  const uploadPart = document.getElementById("upload-part");
  const referencePart = document.getElementById("reference-part");
  const progressBox = document.getElementById("progress-box");
  const progress = document.getElementById("upload-progress");
  const progressText = document.getElementById("progress-text");
  const errorBox = document.getElementById("form-error");
  const statusBox = document.getElementById("form-status");
  const button = document.getElementById("submit-button");
  let file = null;

  class ApiError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }

  function mib(n) {
    return n < 1048576 ? (n / 1024).toFixed(1) + " KiB" : (n / 1048576).toFixed(1) + " MiB";
  }
  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = false;
    errorBox.focus && errorBox.setAttribute("tabindex", "-1");
    errorBox.focus();
  }
  function clearError() { errorBox.hidden = true; errorBox.textContent = ""; }
  function status(message) { statusBox.textContent = message; }
  function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

  async function api(method, url, body, headers) {
    const init = { method, headers: Object.assign({ Accept: "application/json" }, headers || {}),
                   credentials: "same-origin" };
    if (body instanceof Blob) {
      init.body = body;
    } else if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(url, init);
    let payload = null;
    try { payload = await response.json(); } catch (e) { payload = null; }
    if (!response.ok) {
      const detail = payload && payload.detail ? payload.detail : response.status + " " + response.statusText;
      throw new ApiError(response.status, detail);
    }
    return payload;
  }

  function syncAlgorithmFields() {
    newAlgorithm.hidden = algorithmSelect.value !== "";
  }
  algorithmSelect.addEventListener("change", syncAlgorithmFields);
  syncAlgorithmFields();

  function syncSource() {
    const source = form.querySelector("input[name=source]:checked").value;
    uploadPart.hidden = source !== "upload";
    referencePart.hidden = source !== "reference";
  }
  form.querySelectorAll("input[name=source]").forEach((el) => el.addEventListener("change", syncSource));
  syncSource();

  function chooseFile(chosen) {
    file = chosen || null;
    fileName.textContent = file ? "Selected: " + file.name + " (" + mib(file.size) + ")" : "";
  }
  dropZone.addEventListener("click", () => fileInput.click());
  dropZone.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") { event.preventDefault(); fileInput.click(); }
  });
  fileInput.addEventListener("change", () => chooseFile(fileInput.files[0]));
  ["dragenter", "dragover"].forEach((name) => dropZone.addEventListener(name, (event) => {
    event.preventDefault();
    dropZone.classList.add("over");
  }));
  ["dragleave", "drop"].forEach((name) => dropZone.addEventListener(name, (event) => {
    event.preventDefault();
    dropZone.classList.remove("over");
  }));
  dropZone.addEventListener("drop", (event) => {
    if (event.dataTransfer && event.dataTransfer.files.length) chooseFile(event.dataTransfer.files[0]);
  });

  function showProgress(offset, total, note) {
    progressBox.hidden = false;
    const pct = total ? Math.floor((100 * offset) / total) : 0;
    progress.value = pct;
    progressText.textContent = mib(offset) + " of " + mib(total) + " (" + pct + "%)" + (note ? " — " + note : "");
  }

  async function ensureAlgorithm() {
    if (algorithmSelect.value) return Number(algorithmSelect.value);
    const value = (id) => document.getElementById(id).value.trim();
    if (!value("name")) throw new ApiError(400, "name: give the new algorithm a short name");
    const created = await api("POST", "/api/v1/algorithms", {
      name: value("name"), title: value("title"), authors: value("authors"),
      licence: value("licence"), description: value("description"), visibility: value("visibility"),
    });
    // From now on this form submits versions of the algorithm just created.
    const option = new Option(created.title + " (" + created.name + ")", String(created.id), true, true);
    algorithmSelect.add(option);
    syncAlgorithmFields();
    return created.id;
  }

  function resumeKey(f) { return "szbench-upload:" + f.name + ":" + f.size + ":" + f.lastModified; }

  async function openSession(f) {
    const saved = window.localStorage.getItem(resumeKey(f));
    if (saved) {
      try {
        const session = await api("GET", "/api/v1/uploads/" + encodeURIComponent(saved));
        // A refused session's bytes are gone: start a new one.
        if (session.size_bytes === f.size && session.state !== "refused") return session;
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;  // network down: let the caller retry
      }
      window.localStorage.removeItem(resumeKey(f));
    }
    const session = await api("POST", "/api/v1/uploads", { filename: f.name, size_bytes: f.size });
    window.localStorage.setItem(resumeKey(f), session.id);
    return session;
  }

  async function upload(f) {
    if (f.size > maxBytes) throw new ApiError(413, "the file is " + mib(f.size) + ", over the limit of " + mib(maxBytes));
    const session = await openSession(f);
    let offset = session.offset;
    let failures = 0;
    showProgress(offset, f.size, offset ? "resuming" : "");
    while (offset < f.size) {
      const end = Math.min(offset + chunkBytes, f.size);
      try {
        const answer = await api("PUT", "/api/v1/uploads/" + session.id + "?offset=" + offset,
          f.slice(offset, end), { "Content-Type": "application/octet-stream",
                                  "Content-Range": "bytes " + offset + "-" + (end - 1) + "/" + f.size });
        offset = answer.offset;
        failures = 0;
        showProgress(offset, f.size);
      } catch (e) {
        // A refused chunk that is the client's fault (too big, wrong file) ends the upload.
        if (e instanceof ApiError && e.status !== 409 && e.status < 500) throw e;
        failures += 1;
        if (failures > 30) throw new ApiError(0, "the upload keeps failing; check your connection and submit again to resume");
        const wait = Math.min(10000, 500 * 2 ** Math.min(failures - 1, 5));
        showProgress(offset, f.size, "connection lost, resuming in " + Math.round(wait / 1000) + " s");
        await sleep(wait);
        try {
          const state = await api("GET", "/api/v1/uploads/" + session.id);
          offset = state.offset;  // the server says where to go on from
          showProgress(offset, f.size, "resuming");
        } catch (inner) {
          if (inner instanceof ApiError && inner.status === 404) throw inner;
        }
      }
    }
    return session.id;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    const version = document.getElementById("version").value.trim();
    const source = form.querySelector("input[name=source]:checked").value;
    const reference = document.getElementById("image-reference").value.trim();
    if (!version) { showError("version: give this version a label, e.g. 1.0.0"); return; }
    if (source === "upload" && !file) { showError("image: choose or drop an image archive (.tar or .tar.gz)"); return; }
    if (source === "reference" && !reference) { showError("image_reference: give a reference pinned by digest"); return; }
    button.disabled = true;
    try {
      status("Saving the algorithm…");
      const algorithmId = await ensureAlgorithm();
      const body = { version: version, wants_gpu: document.getElementById("wants-gpu").checked };
      const phase = document.getElementById("phase");
      if (phase && phase.value) body.phase = phase.value;
      if (source === "upload") {
        status("Uploading…");
        body.upload_id = await upload(file);
        status("Checking the image archive…");
      } else {
        body.image_reference = reference;
      }
      let created;
      try {
        created = await api("POST", "/api/v1/algorithms/" + algorithmId + "/versions", body);
      } catch (e) {
        // Name the file the server's check refused (its message names the member or field).
        if (e instanceof ApiError && source === "upload") throw new ApiError(e.status, file.name + ": " + e.message);
        throw e;
      }
      if (file) window.localStorage.removeItem(resumeKey(file));
      status("Submitted. Its smoke test starts shortly.");
      window.location.assign("/submissions?msg=" + encodeURIComponent(
        "Version " + created.version + " submitted; the smoke test starts shortly."));
    } catch (e) {
      status("");
      showError(e instanceof ApiError ? "Refused: " + e.message : "Network error: " + e.message);
    } finally {
      button.disabled = false;
    }
  });
})();
