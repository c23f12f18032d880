// Library: the catalog with Install and live progress (SSE), installed models with
// load / unload / delete and their memory, and the resident set.
import { $, api, say, sayError, el, fmtBytes, fmtEta, clearInvalid, keepFocus, markInvalid } from "./common.js";

const FINAL = new Set(["done", "failed", "cancelled"]);
const catalogItems = new Map();  // model id -> {li, progress, text, install, cancel, status}
let events = null;
let lastModels = "";
let refocus = null;  // the model whose row had the keyboard when its action re-renders the table
window.voxgate = { downloads: {}, progress: [] };  // for tests: every download update seen

// -- installed models ---------------------------------------------------------------

function stateOf(m) {
  if (m.loading) return ["loading", "busy"];
  if (m.busy) return ["busy", "busy"];
  if (m.loaded) return ["loaded", "on"];
  return m.load_error ? ["load failed", "failed"] : ["not loaded", ""];
}

// Its last failed load (GET /v1/models `load_error`), until a load succeeds; as text, never markup.
function loadError(m) {
  const error = m.load_error;
  if (!error || m.loaded || m.loading) return null;
  const hint = error.retryable ? "" : " Another try fails the same way until the model's files are fixed.";
  return el("p", { class: "status small load-error", "data-kind": "error",
                   text: `Its last load on ${error.device} failed: ${error.message.replace(/\.$/, "")}.${hint}` });
}

function modelRow(m) {
  const rowStatus = el("p", { class: "status small", role: "status" });
  const [label, kind] = stateOf(m);
  const act = (text, handler, extra = {}) => {
    const b = el("button", { type: "button", class: `small ${extra.class || ""}`, text,
                             "aria-label": `${text} ${m.id}` });
    b.addEventListener("click", async () => {
      b.disabled = true;
      refocus = m.id;  // the keyboard goes back to this row once it is drawn again (Unload becomes Load)
      say(rowStatus, `${text}…`, "busy");
      try {
        await handler();
        say(rowStatus, "");
        lastModels = "";
        await loadModels();
      } catch (err) {
        b.disabled = false;
        b.focus();
        refocus = null;
        sayError(rowStatus, err, `Could not ${text.toLowerCase()}`);
      }
    });
    return b;
  };
  const actions = [
    m.loaded ? act("Unload", () => api("POST", `/v1/models/${encodeURIComponent(m.id)}/unload`, {}))
             : act("Load", () => api("POST", `/v1/models/${encodeURIComponent(m.id)}/load`, {})),
  ];
  if (m.source !== "embedded") {
    actions.push(act("Delete", async () => {
      if (!confirm(`Delete ${m.id}? Its files are removed if the library installed them.`)) return;
      await api("DELETE", `/v1/library/models/${encodeURIComponent(m.id)}`);
      await loadCatalog();
    }, { class: "danger" }));
  }
  return el("tr", { "data-model": m.id },
    el("th", { scope: "row" }, el("span", { text: m.name }), el("br"), el("span", { class: "muted small", text: m.id })),
    el("td", { class: "hide-narrow", text: m.family }),
    el("td", { class: "hide-narrow", text: m.source }),
    el("td", {}, el("span", { class: `pill ${kind}`, text: label }), loadError(m)),
    el("td", { text: m.loaded ? fmtBytes(m.memory_bytes) : "–" }),
    el("td", {}, el("div", { class: "row-actions" }, ...actions), rowStatus));
}

async function loadModels() {
  try {
    const { data } = await api("GET", "/v1/models");
    if ($("installed-status").dataset.kind === "error") say($("installed-status"), "");  // (that try is over)
    const key = JSON.stringify(data.map(({ last_used, ...m }) => m));
    if (key === lastModels) return;  // re-rendering would take the keyboard focus away
    lastModels = key;
    // The rows are drawn anew (a load's state changes, Load becomes Unload): the keyboard stays in
    // the row it was in, on the button in the same place, else goes to the heading (model deleted).
    const active = document.activeElement;
    const was = active && active.closest ? active.closest("#installed tr") : null;
    const focusModel = refocus || (was ? was.dataset.model : null);
    const place = was ? [...was.querySelectorAll("button")].indexOf(active) : 0;
    $("installed").replaceChildren(...data.map(modelRow));
    if (focusModel && (!document.activeElement || document.activeElement === document.body)) {
      const row = [...$("installed").rows].find((r) => r.dataset.model === focusModel);
      const buttons = row ? [...row.querySelectorAll("button")] : [];
      (buttons[Math.max(place, 0)] || buttons[0] || $("installed-h")).focus();
    }
    refocus = null;
    const resident = data.filter((m) => m.loaded || m.loading);
    const total = resident.reduce((sum, m) => sum + (m.memory_bytes || 0), 0);
    $("resident").textContent = resident.length
      ? `${resident.length} loaded (${fmtBytes(total)}): ${resident.map((m) => `${m.id}${m.busy ? " (busy)" : ""}`).join(", ")}`
      : "No model is loaded; the first request to a model loads it.";
  } catch (err) {
    sayError($("installed-status"), err, "Could not load the installed models");
  }
}

// -- catalog and downloads ----------------------------------------------------------

// A button whose request is under way says so (aria-disabled) and ignores presses: disabling it
// would drop the keyboard to <body> (found by a keyboard trial).
function busy(button) {
  if (button.getAttribute("aria-disabled") === "true") return true;
  button.setAttribute("aria-disabled", "true");
  return false;
}

function catalogItem(model) {
  const status = el("p", { class: "status small", role: "status", "aria-live": "polite" });
  const progress = el("progress", { max: "100", value: "0", "aria-label": `Download of ${model.name}` });
  const text = el("span", { class: "muted small" });
  const box = el("div", { class: "progress", hidden: true }, progress, text);
  const install = el("button", { type: "button", class: "primary", text: "Install", "aria-label": `Install ${model.name}` });
  const cancel = el("button", { type: "button", text: "Cancel", hidden: true, "aria-label": `Cancel the download of ${model.name}` });
  const dismiss = el("button", { type: "button", text: "Dismiss", hidden: true,
                                 "aria-label": `Dismiss the ended download of ${model.name}` });
  const heading = el("h3", { text: model.name, tabindex: "-1" });
  const item = { model, progress, text, box, install, cancel, dismiss, heading, status, downloadId: null };
  // Not disabled while it starts (the keyboard would fall to <body>): showDownload moves it to Cancel.
  install.addEventListener("click", async () => {
    if (busy(install)) return;
    say(status, "Starting…", "busy");
    try {
      const download = await api("POST", "/v1/library/install", { id: model.id });
      showDownload(item, download);
    } catch (err) {
      sayError(status, err, "Install failed");
    } finally {
      install.removeAttribute("aria-disabled");
    }
  });
  cancel.addEventListener("click", async () => {
    if (!item.downloadId || busy(cancel)) return;
    try {
      showDownload(item, await api("DELETE", `/v1/library/downloads/${encodeURIComponent(item.downloadId)}`));
    } catch (err) {
      sayError(status, err, "Could not cancel");
    } finally {
      cancel.removeAttribute("aria-disabled");
    }
  });
  dismiss.addEventListener("click", async () => {
    if (!item.downloadId || busy(dismiss)) return;
    try {
      await api("DELETE", `/v1/library/downloads/${encodeURIComponent(item.downloadId)}`);  // removes an ended one
      item.downloadId = null;
      item.downloadState = null;
      item.box.hidden = true;
      keepFocus([dismiss, install, heading], () => { dismiss.hidden = true; });
      say(status, "");
    } catch (err) {
      sayError(status, err, "Could not dismiss");
    } finally {
      dismiss.removeAttribute("aria-disabled");
    }
  });
  const meta = [model.family, fmtBytes(model.size_bytes) + (model.size_is_approximate ? " (about)" : ""),
                (model.languages || []).join(", "), model.licence].filter(Boolean).join(" · ");
  item.li = el("li", { "data-catalog": model.id },
    el("div", {}, item.heading, el("p", { class: "muted small", text: meta }),
       model.notes ? el("p", { class: "small", text: model.notes }) : null),
    el("div", { class: "row-actions" }, install, cancel, dismiss),
    box, status);
  setInstalled(item, model.installed);
  catalogItems.set(model.id, item);
  if (model.download) showDownload(item, model.download);
  return item.li;
}

function setInstalled(item, installed) {
  item.install.textContent = installed ? "Installed" : "Install";
  item.install.disabled = installed;
}

async function refreshInstalled(item) {
  try {
    const { data } = await api("GET", "/v1/library/catalog");
    const model = data.find((m) => m.id === item.model.id);
    const installed = Boolean(model && model.installed);
    setInstalled(item, installed);
    if (installed) {
      say(item.status, "Installed.", "ok");
    } else {
      item.box.hidden = true;
      say(item.status, "");
    }
  } catch (err) {
    sayError(item.status, err, "Could not check the install");
  }
}

// Where the keyboard goes as the buttons change: Cancel while it downloads, then Install (to try
// again) or Dismiss, else the model's heading.
function showDownload(item, d) {
  // The install's answer can arrive after the SSE events it started: never go back from an end.
  if (item.downloadId === d.id && FINAL.has(item.downloadState) && !FINAL.has(d.state)) return;
  keepFocus([item.cancel, item.install, item.dismiss, item.heading], () => updateDownload(item, d));
}

// The bar and its line. A total that still counts a catalog size marked approximate (`total_is_approximate`:
// the source has not said that file's size yet) is "about" that, and so are the percent and the time left
// drawn from it, which change when it does (as `voxgate models install` says); once more has come than
// that total, how much is left is not known: the bar shows activity, not a place, and the line what came.
// Done, every byte is there: what came is the size.
function progressOf(d) {
  const ended = d.state === "done";
  const about = d.total_is_approximate && !ended ? "about " : "";
  if (about && d.bytes_done >= d.bytes_total) {
    return { value: null, percent: null, amount: `${fmtBytes(d.bytes_done)} so far (the total is not known yet)`, eta: null };
  }
  const percent = ended ? 100 : d.percent;
  return { value: percent, percent: `${about}${percent}%`, eta: `ETA ${about}${fmtEta(d.eta_s)}`,
           amount: `${fmtBytes(d.bytes_done)} of ${about}${fmtBytes(ended ? d.bytes_done : d.bytes_total)}` };
}

function updateDownload(item, d) {
  item.downloadId = d.id;
  item.downloadState = d.state;
  item.box.hidden = false;
  const shown = progressOf(d);
  if (shown.value === null) item.progress.removeAttribute("value");  // (indeterminate)
  else item.progress.value = shown.value;
  item.progress.setAttribute("aria-valuetext", shown.percent || shown.amount);
  const parts = [shown.percent, shown.amount];
  if (d.state === "downloading") parts.push(`${fmtBytes(d.rate_bps)}/s`, shown.eta);
  else parts.push(d.state);
  item.text.textContent = parts.filter(Boolean).join(" · ");
  const active = !FINAL.has(d.state);
  item.cancel.hidden = !active;
  item.cancel.disabled = false;
  item.dismiss.hidden = !(d.state === "failed" || d.state === "cancelled");
  item.dismiss.disabled = false;
  item.install.disabled = active || d.state === "done";
  if (d.state === "done") {
    // Whether it is installed is the library's word, not the download's: a model installed
    // and then deleted keeps a finished download, which must not make it look installed.
    refreshInstalled(item);
    loadModels();
  } else if (d.state === "failed") {
    item.install.disabled = false;
    sayError(item.status, d.error ? d.error.message : "failed", "Install failed");
  } else if (d.state === "cancelled") {
    item.install.disabled = false;
    say(item.status, "Cancelled.");
  } else {
    say(item.status, "");
  }
  window.voxgate.downloads[d.model_id] = d;
  window.voxgate.progress.push([d.model_id, d.state, d.percent]);
}

function listen() {
  if (events) return;
  events = new EventSource("/v1/library/downloads/events");
  events.addEventListener("download", (e) => {
    const d = JSON.parse(e.data);
    const item = catalogItems.get(d.model_id);
    if (item) showDownload(item, d);
  });
  events.onerror = () => {
    if (events.readyState === EventSource.CLOSED) {
      say($("catalog-status"), "Live progress is unavailable; reload the page to retry.", "error");
    }
  };
}

async function loadCatalog() {
  try {
    const { data } = await api("GET", "/v1/library/catalog");
    const installable = data.filter((m) => (m.kind || "model") === "model");
    catalogItems.clear();
    $("catalog").replaceChildren(...installable.map(catalogItem));
    if (!installable.length) say($("catalog-status"), "The catalog is empty.");
    listen();
  } catch (err) {
    sayError($("catalog-status"), err, "Could not load the catalog");
  }
}

// -- a folder already on the server -------------------------------------------------

// A second Add while the first is on its way (a double click, a slow network) was sent too: the
// model was added, and the page said "Could not add the folder" (its id was taken, by it).
let adding = false;

async function addFolder(e) {
  e.preventDefault();
  if (adding) return;
  clearInvalid($("folder-form"));
  const body = { path: $("f-path").value.trim(), family: $("f-family").value };
  if ($("f-id").value.trim()) body.id = $("f-id").value.trim();
  if ($("f-name").value.trim()) body.name = $("f-name").value.trim();
  say($("folder-status"), "Checking the folder…", "busy");
  adding = true;
  try {
    const model = await api("POST", "/v1/library/install", body);
    say($("folder-status"), `Added ${model.id} (${model.family}; voices: ${model.voices.join(", ")}).`, "ok");
    $("folder-form").reset();
    lastModels = "";
    await loadModels();
  } catch (err) {
    sayError($("folder-status"), err, "Could not add the folder");
    const input = { path: "f-path", family: "f-family", id: "f-id", name: "f-name" }[err.field];
    if (input) markInvalid($(input), $("folder-status"));
  } finally {
    adding = false;
  }
}

$("folder-form").addEventListener("submit", addFolder);
loadModels();
loadCatalog();
setInterval(loadModels, 3000);  // load state and memory change under traffic
