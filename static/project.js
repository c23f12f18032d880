// Project editor: settings, import (preview before applying), passages with their speakers
// and takes, background generation with progress, the joins, and the export.
import { $, api, say, sayError, el, fillModels, fmtDuration, clearInvalid, keepFocus, markInvalid } from "./common.js";
import { fillSpeakers } from "./project-speakers.js";
import { takeItem } from "./project-takes.js";
import { joinItem } from "./project-arrange.js";
import { focusedPlace, refocus } from "./project-focus.js";
import { keepEdits, restoreEdits, saveTyped as saveTypedOf, typedPassages } from "./project-drafts.js";
import { exportAudio } from "./project-export.js";
import "./players.js";  // one take (or join) plays at a time

const projectId = $("editor").dataset.project;
const POLL_MS = 500;
let project = null;
let lastRendered = "";
let preview = null;  // {text, format} of the preview shown
let polling = false;
const ctx = { projectId, reload, openEditors: {} };
window.voxgate = { project: null, job: null, joinPlaying: null, joinPlayed: null, renders: 0 };

async function reload() {
  project = await api("GET", `/v1/projects/${projectId}`);
  window.voxgate.project = project;
  render();
  if (project.job && project.job.state === "running") poll();
}

// -- settings -------------------------------------------------------------------------

// A model removed from the library (elsewhere) is shown as it is, saying so, not as the default model;
// the project then opened as "Could not open the project", its pause left empty (Save said "type a
// number of milliseconds"), and it could not be given another model from the page.
let shownSettings = null;  // what the form was filled with: it is filled again only if unchanged since
const settingsForm = () => [$("s-name").value, $("s-model").value, $("s-speaker").value, $("s-pause").value].join("\n");

async function showSettings() {
  $("s-name").value = project.name;
  $("s-pause").value = project.pause_ms;
  const models = await fillModels($("s-model"), project.model);
  if (!models.some((m) => m.id === project.model)) {
    $("s-model").add(new Option(`${project.model} (not installed: choose another)`, project.model));
    $("s-model").value = project.model;
    $("s-speaker").replaceChildren(new Option(`${project.speaker} (not available: choose another)`, project.speaker));
    say($("s-status"), `The model ${project.model} is no longer installed: choose another model, then Save settings.`, "error");
  } else {
    await fillSpeakers($("s-speaker"), project.model, { selected: project.speaker });
  }
  shownSettings = settingsForm();
}

async function saveSettings(e) {
  e.preventDefault();
  clearInvalid($("settings"));
  const pause = $("s-pause");
  if (pause.validity.badInput || pause.value.trim() === "") {  // (Number("") is 0: not what was typed)
    say($("s-status"), "Could not save (pause_ms): type a number of milliseconds (0 to 10000).", "error");
    markInvalid(pause, $("s-status"));
    return;
  }
  try {
    await api("PATCH", `/v1/projects/${projectId}`, { name: $("s-name").value, model: $("s-model").value,
                                                       speaker: $("s-speaker").value, pause_ms: Number($("s-pause").value) });
    say($("s-status"), "Saved.", "ok");
    await reload();
    shownSettings = settingsForm();
  } catch (err) {
    sayError($("s-status"), err, err.field ? `Could not save (${err.field})` : "Could not save");
    const input = { name: "s-name", model: "s-model", speaker: "s-speaker", pause_ms: "s-pause" }[err.field];
    if (input) markInvalid($(input), $("s-status"));
  }
}

// -- import ---------------------------------------------------------------------------

async function readFile() {
  const file = $("i-file").files[0];
  if (!file) return;
  $("i-format").value = /\.(md|markdown)$/i.test(file.name) ? "markdown" : "text";
  $("i-text").value = await file.text();
  previewOutOfDate();
}

async function showPreview() {
  const text = $("i-text").value;
  if (!text.trim()) { say($("i-status"), "Choose a file or paste a text first.", "error"); return; }
  try {
    const format = $("i-format").value;
    const data = await api("POST", `/v1/projects/${projectId}/import`, { text, format });
    preview = { text, format };
    $("preview-list").replaceChildren(...data.passages.map((p) => el("li", { class: `preview-${p.kind}`, text: p.text })));
    $("preview-summary").textContent = `${data.num_passages} passage${data.num_passages === 1 ? "" : "s"}: nothing is changed until you add them.`;
    $("preview").hidden = false;
    say($("i-status"), "");
  } catch (err) {
    sayError($("i-status"), err, "Could not split the text");
  }
}

// A second click while the first is on its way (a double click, a slow network) added the passages
// twice: one at a time (a flag, not disabled buttons, which would drop the keyboard).
let applying = false;

async function applyImport(replace) {
  if (!preview || applying) return;
  if (replace && project.passages.length && !confirm("Replace every passage (and its takes) with the preview?")) return;
  applying = true;
  try {
    await api("POST", `/v1/projects/${projectId}/import`, { ...preview, apply: true, replace });
    discardPreview();
    // The text is in the passages now: it stayed in the box, where Preview and Add added it again.
    $("i-text").value = "";
    $("i-file").value = "";
    say($("i-status"), replace ? "Passages replaced." : "Passages added.", "ok");
    await reload();
  } catch (err) {
    sayError($("i-status"), err, "Could not import");
  } finally {
    applying = false;
  }
}

function discardPreview() {
  preview = null;
  $("preview").hidden = true;
  $("preview-list").replaceChildren();
}

// The text (or its format) changed under a preview: Add would have added the old split unseen
// (found by a new-user trial), so the preview goes, saying why.
function previewOutOfDate() {
  if (!preview) return;
  discardPreview();
  say($("i-status"), "The text changed: preview the split again.", "error");
}

// -- passages -------------------------------------------------------------------------

function passageItem(passage, i, count) {
  const n = i + 1;
  const itemStatus = el("p", { class: "status small", role: "status" });
  // The button is disabled while its request runs; drawn again only when the project changed, so
  // it comes back itself (a cancelled confirmation, or a generation cancelled before its take).
  const act = (text, aria, fn, cls = "small", question = null) => {
    const b = el("button", { type: "button", class: cls, text, "aria-label": aria });
    b.addEventListener("click", async () => {
      if (question && !confirm(question)) return;
      const place = focusedPlace(b);
      b.disabled = true;
      try {
        await fn();
        await reload();
      } catch (err) {
        sayError(itemStatus, err, `Could not ${text.toLowerCase()}`);
      } finally {
        b.disabled = false;
        refocus(place);
      }
    });
    return b;
  };
  const text = el("textarea", { rows: "3", "aria-label": `Text of passage ${n}` });
  text.value = passage.text;
  text.dataset.saved = passage.text;
  const saveText = act("Save text", `Save the text of passage ${n}`, async () => {
    await api("PATCH", `/v1/projects/${projectId}/passages/${passage.id}`, { text: text.value });
    await askAgainIfSpoken(passage.id);
  });
  saveText.hidden = true;
  text.addEventListener("input", () => {
    saveText.hidden = text.value === passage.text;
    showGenerateAll();
  });
  const speaker = el("select", { "aria-label": `Speaker of passage ${n}` });
  fillSpeakers(speaker, project.model, { defaultLabel: `Project default (${project.speaker})`, selected: passage.speaker || "" })
    .catch((err) => sayError(itemStatus, err, "Could not load speakers"));
  speaker.addEventListener("change", async () => {
    try {
      await api("PATCH", `/v1/projects/${projectId}/passages/${passage.id}`, { speaker: speaker.value || null });
      await askAgainIfSpoken(passage.id);
      await reload();
    } catch (err) {
      sayError(itemStatus, err, "Could not change the speaker");
    }
  });
  // What is shown is what is spoken (a take of the saved text was shown as up to date beside the words typed).
  const generate = act("Generate", `Generate passage ${n}`, async () => {
    await saveTyped(passage.id);
    await api("POST", `/v1/projects/${projectId}/generate`, { passages: [passage.id] });
  });
  // The cursor is in the text as typed (the saved text was split at that offset, mid-word).
  // A cursor at either end (where it is when the text was never clicked) was refused as "at must be
  // a character offset inside the text": said in the page's words, the keyboard taken to the text.
  const split = act("Split at cursor", `Split passage ${n} at the cursor`, async () => {
    const at = text.selectionStart;
    if (!text.value.slice(0, at).trim() || !text.value.slice(at).trim()) {
      text.focus();
      throw new Error("put the cursor in the text where the passage should be split, then press Split at cursor.");
    }
    await saveTyped(passage.id);
    await api("POST", `/v1/projects/${projectId}/passages/${passage.id}/split`, { at });
  });
  const merge = i < count - 1 ? act("Merge with next", `Merge passage ${n} with passage ${n + 1}`, async () => {
    await saveTyped(passage.id, project.passages[i + 1].id);
    await api("POST", `/v1/projects/${projectId}/passages/${passage.id}/merge`, {});
  }) : null;
  const del = act("Delete", `Delete passage ${n}`, () => api("DELETE", `/v1/projects/${projectId}/passages/${passage.id}`),
                  "small danger", `Delete passage ${n} and its takes?`);
  const state = passage.out_of_date
    ? el("span", { class: "pill busy", text: passage.takes.length ? "out of date" : "not generated" })
    : el("span", { class: "pill on", text: "up to date" });
  const takes = el("ol", { class: "ptakes" }, ...passage.takes.map((t, k) => takeItem(ctx, passage, t, n, k + 1)));
  return el("li", { class: "passage", "data-passage": passage.id },
    el("div", { class: "passage-head" }, el("span", { class: "passage-n", text: `${n}.` }), state, speaker,
       el("div", { class: "row-actions" }, generate, split, merge, del)),
    text, el("div", { class: "row-actions" }, saveText), takes, itemStatus);
}

// Words typed and not saved are saved before a split or a merge changes their text (they were
// dropped), and before a Generate (a passage's, or of the out-of-date passages) speaks it.
const saveTyped = (...ids) => saveTypedOf(projectId, ...ids);

function render() {
  const key = JSON.stringify({ ...project, job: null, updated_at: 0 });
  if (key === lastRendered) return;  // re-rendering would stop a take that is playing
  lastRendered = key;
  window.voxgate.renders += 1;
  $("p-title").textContent = project.name;
  document.title = `${project.name} · Voxgate`;
  const count = project.passages.length;
  const kept = keepEdits();
  $("passages").replaceChildren(...project.passages.map((p, i) => passageItem(p, i, count)));
  $("passages-empty").hidden = count > 0;
  $("duration").textContent = count ? `${count} passages · ${project.num_out_of_date} out of date · ${fmtDuration(project.duration_ms)} chosen` : "";
  showGenerateAll();
  const joins = [];
  project.passages.forEach((p, i) => {
    const next = project.passages[i + 1];
    if (next && p.chosen_take && next.chosen_take) joins.push(joinItem(ctx, project, p, next, i + 1));
  });
  $("joins").replaceChildren(...joins);
  $("joins-empty").hidden = joins.length > 0;
  restoreEdits(kept);
}

// -- generation -----------------------------------------------------------------------

// The passages "Generate out-of-date passages" speaks: those out of date, and those with words typed
// (saved first: the saved text was spoken, and the passage shown up to date beside the typed words).
function showGenerateAll() {
  const typed = new Set(typedPassages());
  const count = project.passages.filter((p) => p.out_of_date || typed.has(p.id)).length;
  $("g-all").textContent = `Generate out-of-date passages (${count})`;
  keepFocus(GENERATION, () => { $("g-all").disabled = count === 0; });
}

// Generate disables itself once nothing is out of date and Cancel hides when the job ends: the
// keyboard goes to the other one, else to the Passages heading, never to <body> (a keyboard trial).
const GENERATION = [$("g-cancel"), $("g-all"), $("generate-h")];

// The passages of the running job, as polled. One whose text or speaker is saved once its turn has
// begun (being spoken, or done) is asked for again: the job would end with the take of what it was
// before, though the page says "you can go on editing" (a queued one is read at its turn; the job
// drops a second ask whose take turns out current: docs/projects.md).
let jobPassages = { id: null, ids: new Set() };

async function askAgainIfSpoken(passageId) {
  const job = window.voxgate.job;
  if (!job || job.state !== "running" || job.id !== jobPassages.id) return;
  if (!jobPassages.ids.has(passageId) || job.queued.includes(passageId)) return;
  showJob(await api("POST", `/v1/projects/${projectId}/generate`, { passages: [passageId] }));
  poll();
}

// A job's error, with the passage it is of (its number now; the message alone did not say which).
function failure(error) {
  const i = project ? project.passages.findIndex((p) => p.id === error.passage_id) : -1;
  return i < 0 ? error.message : `passage ${i + 1}: ${error.message}`;
}

function showJob(job) {
  window.voxgate.job = job;
  if (jobPassages.id !== job.id) jobPassages = { id: job.id, ids: new Set() };
  for (const id of [job.current, ...job.queued]) if (id) jobPassages.ids.add(id);
  const running = job.state === "running";
  $("g-progress").hidden = false;
  keepFocus(GENERATION, () => { $("g-cancel").hidden = !running; });
  const finished = job.done + job.failed;
  $("g-bar").value = job.total ? Math.round((100 * finished) / job.total) : 0;
  $("g-text").textContent = `${finished} of ${job.total} passages${running ? " · generating" : ""}`;
  if (running) say($("g-status"), "Generating in the background: you can go on editing.", "busy");
  else if (job.failed) say($("g-status"), `${job.failed} of ${job.total} passages failed: ${job.errors.map(failure).join("; ")}`, "error");
  else if (job.state === "cancelled") say($("g-status"), "Generation cancelled.");
  else say($("g-status"), `Generated ${job.done} passage${job.done === 1 ? "" : "s"}.`, "ok");
}

async function poll() {
  if (polling) return;
  polling = true;
  let seen = -1;
  try {
    for (;;) {
      const job = await api("GET", `/v1/projects/${projectId}/job`);
      showJob(job);
      if (job.done + job.failed !== seen || job.state !== "running") {
        seen = job.done + job.failed;
        project = await api("GET", `/v1/projects/${projectId}`);
        window.voxgate.project = project;
        render();
      }
      if (job.state !== "running") break;
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  } catch (err) {
    sayError($("g-status"), err, "Lost track of the generation");
  } finally {
    polling = false;
  }
}

async function generateAll() {
  try {
    for (const id of typedPassages()) {
      try {
        await saveTyped(id);
      } catch (err) {  // (which passage's words were refused: its number now)
        err.message = `passage ${project.passages.findIndex((p) => p.id === id) + 1}: ${err.message}`;
        throw err;
      }
    }
    showJob(await api("POST", `/v1/projects/${projectId}/generate`, {}));
    poll();
  } catch (err) {
    sayError($("g-status"), err, "Could not start");
  }
}

// Words typed in a passage and not saved were lost without a word by a reload or a link: the
// browser asks first.
window.addEventListener("beforeunload", (event) => {
  const typed = [...$("passages").querySelectorAll("li.passage textarea")].some((t) => t.value !== t.dataset.saved);
  if (!typed) return;
  event.preventDefault();
  event.returnValue = "";  // (older browsers ask only when it is set)
});

// -- wiring ---------------------------------------------------------------------------

$("settings").addEventListener("submit", saveSettings);
$("s-model").addEventListener("change", () => fillSpeakers($("s-speaker"), $("s-model").value)
  .catch((err) => sayError($("s-status"), err)));
$("i-file").addEventListener("change", () => readFile().catch((err) => sayError($("i-status"), err, "Could not read the file")));
$("i-preview").addEventListener("click", showPreview);
$("i-text").addEventListener("input", previewOutOfDate);
$("i-format").addEventListener("change", previewOutOfDate);
$("i-append").addEventListener("click", () => applyImport(false));
$("i-replace").addEventListener("click", () => applyImport(true));
$("i-discard").addEventListener("click", discardPreview);
$("g-all").addEventListener("click", generateAll);
$("g-cancel").addEventListener("click", async () => {
  try { showJob(await api("DELETE", `/v1/projects/${projectId}/job`)); } catch (err) { sayError($("g-status"), err); }
});
$("e-export").addEventListener("click", () => exportAudio(projectId, project).catch((err) => sayError($("e-status"), err, "Could not export")));
api("GET", `/v1/projects/${projectId}`).then(async (data) => {
  project = data;
  window.voxgate.project = project;
  $("editor").hidden = false;
  render();
  await showSettings();
  if (project.job) { showJob(project.job); if (project.job.state === "running") poll(); }
  document.addEventListener("visibilitychange", seenAgain);
  window.addEventListener("focus", seenAgain);
}).catch((err) => sayError($("p-status"), err, "Could not open the project"));

// Work done in another tab (or by the API) showed only after a reload: a generation started there
// left these passages "not generated" and offered to generate them again. The project (and its job,
// followed if it runs) is read again when the page is seen again; so is the settings form, unless
// something is typed in it (a rename there was named back by a Save of the pause here).
let refreshing = false;
async function seenAgain() {
  if (document.visibilityState !== "visible" || refreshing) return;
  refreshing = true;
  try {
    await reload();
    if (project.job && !polling) showJob(project.job);
    say($("p-status"), "");
    if (settingsForm() === shownSettings) await showSettings();
  } catch (err) {
    sayError($("p-status"), err, "Could not read the project again");
  } finally {
    refreshing = false;
  }
}
