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
  const progressLabel = form.querySelector("label[for=upload-progress]");
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
  function clearError() { errorBox.hidden = true; errorBox.textContent = ""; clearFieldErrors(); }

  // What is wrong with a field is said under it (docs/web-ui.md, "Form errors"): in the
  // page's words (each field's data-hint says what it takes), never in the validator's
  // wording or under an API name ("body.name: String should match pattern ...").
  const FIELDS = {
    name: "name", title: "title", authors: "authors", licence: "licence",
    description: "description", visibility: "visibility", version: "version", phase: "phase",
    image_reference: "image-reference", upload_id: "file", filename: "file",
    size_bytes: "file", file: "file",
  };
  class FieldErrors extends Error {
    constructor(fields) { super("fields"); this.fields = fields; }
  }
  // The file input is hidden: its message goes under the drop zone that stands for it.
  function fieldElement(id) { return id === "file" ? dropZone : document.getElementById(id); }
  function clearFieldErrors() {
    form.querySelectorAll("p.field-error[data-for]").forEach((p) => {
      const el = fieldElement(p.dataset.for);
      if (el) {
        el.removeAttribute("aria-invalid");
        const ids = (el.getAttribute("aria-describedby") || "").split(" ").filter((i) => i && i !== p.id);
        if (ids.length) el.setAttribute("aria-describedby", ids.join(" ")); else el.removeAttribute("aria-describedby");
      }
      p.remove();
    });
  }
  function showFieldErrors(fields) {
    clearFieldErrors();
    for (const [id, text] of Object.entries(fields)) {
      const el = fieldElement(id);
      const p = document.createElement("p");
      p.className = "field-error";
      p.id = id + "-error";
      p.dataset.for = id;
      p.textContent = text;
      el.insertAdjacentElement("afterend", p);
      el.setAttribute("aria-invalid", "true");
      const ids = (el.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      el.setAttribute("aria-describedby", ids.concat(p.id).join(" "));
    }
    const n = Object.keys(fields).length;
    showError(n > 1 ? "Please correct the fields marked below." : "Please correct the field marked below.");
  }
  // A message as a sentence: a full stop at its end (its start may be a name, kept as typed).
  function sentence(text) {
    text = text.trim();
    return text + (/[.!?)]$/.test(text) ? "" : ".");
  }
  // An input's own checks (required, pattern, length), in the page's words.
  function checkInput(id) {
    const el = document.getElementById(id);
    if (el.validity.valueMissing) return "Required.";
    if (el.validity.tooLong) return "At most " + el.maxLength + " characters.";
    if (el.validity.patternMismatch) return el.dataset.hint || "Not in the expected form.";
    return null;
  }
  // An API refusal that names fields first ("version: ...", or a 422's "body.name: ...; ..."),
  // as messages by field; null when it names none of this form's (a quota, a phase's dates).
  function apiFieldErrors(e) {
    const out = {};
    for (const part of e.message.split("; ")) {
      const m = /^(?:body\.|query\.)?([a-z_]+)(?:\.[\w.]+)?: ([\s\S]+)$/.exec(part);
      if (!m || !(m[1] in FIELDS)) return null;
      const id = FIELDS[m[1]];
      if (id in out) continue;
      const el = fieldElement(id);
      const limit = /at most (\d+) characters/i.exec(m[2]);
      if (e.status !== 422) out[id] = sentence(m[2]);  // the platform's own words
      else if (limit) out[id] = "At most " + limit[1] + " characters.";
      else if (/required/i.test(m[2])) out[id] = "Required.";
      else out[id] = (el && el.dataset.hint) || "Not in the expected form.";
    }
    return Object.keys(out).length ? out : null;
  }
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

  function showProgress(offset, total, note, label) {
    progressBox.hidden = false;
    if (progressLabel) progressLabel.textContent = label || "Upload progress";
    const pct = total ? Math.floor((100 * offset) / total) : 0;
    progress.value = pct;
    progressText.textContent = mib(offset) + " of " + mib(total) + " (" + pct + "%)" + (note ? " — " + note : "");
  }

  // The archive's tar headers, read on this computer (gunzipped as they stream, for
  // .tar.gz): the server's first checks, before any byte is sent. Sequential readers:
  function fileReader(f) {
    let pos = 0;
    return {
      async read(n) { const b = new Uint8Array(await f.slice(pos, pos + n).arrayBuffer()); pos += b.length; return b; },
      async skip(n) { pos += n; },
      cancel() {},
    };
  }
  function streamReader(stream) {
    const reader = stream.getReader();
    let pending = new Uint8Array(0);
    async function more() {
      const next = await reader.read();
      if (next.done) return false;
      const joined = new Uint8Array(pending.length + next.value.length);
      joined.set(pending);
      joined.set(next.value, pending.length);
      pending = joined;
      return true;
    }
    return {
      async read(n) {
        while (pending.length < n && await more()) { /* filling */ }
        const out = pending.slice(0, n);
        pending = pending.slice(n);
        return out;
      },
      async skip(n) {
        while (n > 0) {
          if (!pending.length && !(await more())) return;
          const k = Math.min(n, pending.length);
          pending = pending.subarray(k);
          n -= k;
        }
      },
      cancel() { reader.cancel().catch(() => {}); },
    };
  }
  function cstring(bytes, start, length) {
    const part = bytes.subarray(start, start + length);
    const end = part.indexOf(0);
    return new TextDecoder().decode(end < 0 ? part : part.subarray(0, end));
  }
  function validHeader(block) {
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : block[i];
    const stored = parseInt(cstring(block, 148, 8).trim(), 8);
    return stored === sum;
  }
  async function archiveProblem(f) {
    const magic = new Uint8Array(await f.slice(0, 2).arrayBuffer());
    const gz = magic[0] === 0x1f && magic[1] === 0x8b;
    if (gz && typeof DecompressionStream === "undefined") return null;  // the server checks
    const src = gz ? streamReader(f.stream().pipeThrough(new DecompressionStream("gzip"))) : fileReader(f);
    let headers = 0, manifest = null, index = false, longName = null;
    try {
      for (;;) {
        const block = await src.read(512);
        if (block.length < 512 || block.every((b) => b === 0)) break;
        if (!validHeader(block)) {
          return headers ? "the archive is damaged (a tar header's checksum is wrong)"
            : "not a tar archive (" + (gz ? "its gunzipped start" : "its first 512 bytes") + " is not a tar header)";
        }
        headers += 1;
        let name = longName || cstring(block, 0, 100);
        longName = null;
        const prefix = cstring(block, 345, 155);
        if (prefix && cstring(block, 257, 5) === "ustar") name = prefix + "/" + name;
        name = name.replace(/^\.\//, "");
        const size = parseInt(cstring(block, 124, 12).trim() || "0", 8) || 0;
        const type = String.fromCharCode(block[156] || 48);
        const padded = Math.ceil(size / 512) * 512;
        if (type === "L") { longName = cstring(await src.read(padded), 0, size); continue; }
        if (name === "manifest.json" && type === "0" && size < 10 * 1024 * 1024) {
          manifest = new TextDecoder().decode((await src.read(padded)).subarray(0, size));
          continue;
        }
        if (name === "index.json") index = true;
        await src.skip(padded);
      }
    } catch (e) {
      return "the archive could not be read (" + (gz ? "not valid gzip" : e.message) + ")";
    } finally {
      src.cancel();
    }
    if (!headers) return "not a tar archive (it holds no file)";
    if (manifest !== null) {
      let images;
      try { images = JSON.parse(manifest); } catch (e) { return "manifest.json: not valid JSON"; }
      if (!Array.isArray(images)) return "manifest.json: expected a list of images";
      if (images.length !== 1) return "manifest.json: the archive holds " + images.length + " images; submit exactly one";
      if (!images[0] || !images[0].Config) return "manifest.json: the image entry has no Config";
      return null;
    }
    return index ? null : "no manifest.json or index.json: not an image archive written by `docker save`";
  }

  // Created only once everything was checked and the archive is on the server; a retry
  // after a refused first version goes to the algorithm that try made (the preflight names it).
  async function ensureAlgorithm(existingId) {
    if (algorithmSelect.value) return Number(algorithmSelect.value);
    const value = (id) => document.getElementById(id).value.trim();
    if (existingId) {
      const option = new Option(value("name"), String(existingId), true, true);
      algorithmSelect.add(option);
      syncAlgorithmFields();
      return existingId;
    }
    const created = await api("POST", "/api/v1/algorithms", {
      name: value("name"), title: value("title"), authors: value("authors"),
      licence: value("licence"), description: value("description"), visibility: value("visibility"),
      external_evaluation: document.getElementById("external-evaluation").checked,
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

  // After the last byte the server checks the archive and pushes it to its registry, in the
  // background (minutes for a multi-GB image): asked for once, then each step's progress
  // is polled and shown here. No request waits for the steps, so no time-out cuts them off.
  const stepLabels = {
    "checking": "Checking the archive on the server",
    "checking-user": "Checking the image's user on the server",
    "pushing": "Pushing the image to the registry",
  };
  async function serverSteps(id) {
    const url = "/api/v1/uploads/" + id;
    let answer = await api("POST", url + "/check");
    let failures = 0;
    for (;;) {
      const steps = answer.steps;
      if (!steps || steps.step === "done") return;
      if (steps.step === "refused") throw new ApiError(422, steps.detail || "the archive was refused");
      if (steps.step === "failed" || steps.step === "interrupted") {
        failures += 1;
        const why = steps.detail || "the server restarted";
        if (failures > 10) throw new ApiError(503, why + "; submit again to resume");
        const wait = Math.min(30000, 1000 * 2 ** Math.min(failures - 1, 5));
        status("The server's check stopped (" + why + "); asking again in " + Math.round(wait / 1000) + " s…");
        await sleep(wait);
        answer = await api("POST", url + "/check");
        continue;
      }
      const label = stepLabels[steps.step] || steps.step;
      status(label + "…");
      showProgress(steps.done_bytes, steps.total_bytes, "", label);
      await sleep(1000);
      try {
        answer = await api("GET", url);
      } catch (e) {
        if (e instanceof ApiError && e.status < 500) throw e;
        failures += 1;  // connection lost or the server away: keep asking, a while
        if (failures > 30) throw e;
      }
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    const version = document.getElementById("version").value.trim();
    const source = form.querySelector("input[name=source]:checked").value;
    const reference = document.getElementById("image-reference").value.trim();
    // The fields' own checks first, each said under its field.
    const wrong = {};
    if (!algorithmSelect.value) {
      for (const id of ["name", "title", "authors", "licence", "description"]) {
        const problem = checkInput(id);
        if (problem) wrong[id] = problem;
      }
    }
    const versionProblem = checkInput("version");
    if (versionProblem) wrong.version = versionProblem;
    if (source === "upload" && !file) wrong.file = "Choose or drop an image archive (.tar or .tar.gz).";
    if (source === "reference" && !reference) wrong["image-reference"] = "Required.";
    if (Object.keys(wrong).length) { showFieldErrors(wrong); return; }
    button.disabled = true;
    try {
      const body = { version: version, wants_gpu: document.getElementById("wants-gpu").checked };
      const phase = document.getElementById("phase");
      if (phase && phase.value) body.phase = phase.value;
      // Before any byte is sent: the archive's header and manifest here, then the quotas,
      // the phase and its dates, the version label, the size on the server.
      if (source === "upload") {
        status("Checking the archive on this computer…");
        const problem = await archiveProblem(file);
        if (problem) throw new FieldErrors({ file: sentence(file.name + ": " + problem) });
      }
      status("Checking quotas, phase and version…");
      const check = { version: version, phase: body.phase || null };
      if (algorithmSelect.value) check.algorithm_id = Number(algorithmSelect.value);
      else check.name = document.getElementById("name").value.trim();
      if (source === "upload") { check.filename = file.name; check.size_bytes = file.size; }
      const ready = await api("POST", "/api/v1/algorithms/preflight", check);
      if (source === "upload") {
        status("Uploading…");
        body.upload_id = await upload(file);
        try {
          await serverSteps(body.upload_id);
        } catch (e) {
          if (e instanceof ApiError && e.status === 422) window.localStorage.removeItem(resumeKey(file));
          if (e instanceof ApiError) throw new ApiError(e.status, file.name + ": " + e.message);
          throw e;
        }
      } else {
        body.image_reference = reference;
      }
      status(ready.existing_algorithm_id && !algorithmSelect.value
        ? "Submitting to your algorithm " + check.name + " (made by an earlier try)…" : "Saving the algorithm…");
      const algorithmId = await ensureAlgorithm(ready.existing_algorithm_id);
      if (source === "upload") status("Submitting the checked image…");
      let created;
      try {
        created = await api("POST", "/api/v1/algorithms/" + algorithmId + "/versions", body);
      } catch (e) {
        // The server's archive check refused the file: said under it, naming it.
        if (e instanceof ApiError && source === "upload" && !apiFieldErrors(e)
            && e.status !== 429 && e.status < 500) {
          throw new FieldErrors({ file: sentence(file.name + ": " + e.message) });
        }
        throw e;
      }
      if (file) window.localStorage.removeItem(resumeKey(file));
      status("Submitted. Its smoke test starts shortly.");
      window.location.assign("/submissions?msg=" + encodeURIComponent(
        "Version " + created.version + " submitted; the smoke test starts shortly."));
    } catch (e) {
      status("");
      const fields = e instanceof FieldErrors ? e.fields : e instanceof ApiError ? apiFieldErrors(e) : null;
      if (fields) showFieldErrors(fields);
      else showError(e instanceof ApiError ? "Refused: " + sentence(e.message) : "Network error: " + e.message);
    } finally {
      button.disabled = false;
    }
  });
})();
