// Voices and presets: create, edit, try and delete speaker presets (/v1/presets).
import { $, api, say, sayError, el, fillModels, fillVoices, fmtMs } from "./common.js";
import { Speaker } from "./speaker.js";

const formStatus = $("form-status");
const listStatus = $("list-status");
// What came before a Try failed part way plays out (speaker.js: `err.partial`), then the row says why it
// ended: endPlayback ends that wait ("ended", "failed": the sound went, or "superseded": another Try).
let endPlayback = null;
const speaker = new Speaker({
  onPosition: (playedMs, msg) => { if (msg.state === "idle" && !speaker.current && endPlayback) endPlayback("ended"); },
  onAudioError: () => { if (endPlayback) endPlayback("failed"); },
});
let editing = null;  // the preset name being edited, or null when creating
const FAMILY_SETTINGS = JSON.parse($("p-settings").dataset.settings);  // family -> [[name, hint], ...]
let families = {};  // model id -> family
// Settings of the preset being edited that the form has no field for (a designed voice's
// `instructions`): kept as they are, not dropped by a save.
let kept = {};

// One number input per setting of the selected model's family, filled from `values`.
function showSettings(values = {}) {
  const fam = families[$("p-model").value];
  $("p-family").textContent = fam || "model's";
  const fields = (FAMILY_SETTINGS[fam] || []).map(([name, hint]) => {
    const input = el("input", { id: `p-set-${name}`, type: "number", step: "any", "data-setting": name,
                                "aria-describedby": `p-set-${name}-hint p-set-${name}-err` });
    if (values[name] != null) input.value = values[name];
    return el("div", { class: "field" }, el("label", { for: input.id, text: name }), input,
              el("span", { id: `p-set-${name}-hint`, class: "muted small", text: hint }),
              el("span", { id: `p-set-${name}-err`, class: "field-error", "aria-live": "polite" }));
  });
  $("p-settings-fields").replaceChildren(...fields);
  $("p-settings").hidden = fields.length === 0;
}

// The settings filled in; a field the browser cannot read as a number (its value is then "",
// as if empty) is an error beside it, not a setting silently dropped.
function settingsData() {
  const out = {};
  for (const input of document.querySelectorAll("[data-setting]")) {
    if (input.validity.badInput) {
      throw Object.assign(new Error(`settings.${input.dataset.setting} must be a number`),
                          { field: `settings.${input.dataset.setting}` });
    }
    if (input.value.trim() !== "") out[input.dataset.setting] = Number(input.value);
  }
  return out;
}

function setSpeed(value) {
  $("p-speed").value = value;
  $("p-speed-out").textContent = `${Number(value).toFixed(2)}×`;
}

async function loadVoiceChoices(selected) {
  await fillVoices($("p-voice"), $("p-model").value, { presets: false });
  if (selected) $("p-voice").value = selected;
}

function formData() {
  return { name: $("p-name").value.trim(), model: $("p-model").value, voice: $("p-voice").value,
           speed: Number($("p-speed").value), settings: { ...(editing ? kept : {}), ...settingsData() } };
}

function fieldInput(field) {
  if (field && field.startsWith("settings.")) return $(`p-set-${field.slice(9)}`);
  return { name: $("p-name"), model: $("p-model"), voice: $("p-voice"), speed: $("p-speed") }[field];
}

// The server's message beside the field it names (the status line says where to look);
// an error naming no field of the form stays in the status line.
function showFieldError(err, prefix) {
  const input = err.field && fieldInput(err.field);
  const beside = input && $(`${input.id}-err`);
  if (!beside) { sayError(formStatus, err, prefix); return; }
  // Beside its field, "settings.noise_scale must be ..." is "Must be ..." (not "Settings.noise_scale").
  const message = err.message.startsWith(`${err.field} `) ? err.message.slice(err.field.length + 1) : err.message;
  const words = message.charAt(0).toUpperCase() + message.slice(1);
  beside.textContent = /[.!?)]$/.test(words) ? words : `${words}.`;
  say(formStatus, `${prefix}: see the field marked below.`, "error");
  input.setAttribute("aria-invalid", "true");
  input.focus();
}

function clearInvalid() {
  for (const input of document.querySelectorAll("#preset-form [aria-invalid]")) input.removeAttribute("aria-invalid");
  for (const span of document.querySelectorAll("#preset-form .field-error")) span.textContent = "";
}

// A second Create (or Save) while the first is on its way (a double click, a slow network) was sent
// too: the preset was made, and the page said "Could not create" (its name was taken, by it).
let saving = false;

async function save(e) {
  e.preventDefault();
  if (saving) return;
  clearInvalid();
  let data;
  try {
    data = formData();
  } catch (err) {
    showFieldError(err, editing ? "Could not save" : "Could not create the preset");
    return;
  }
  saving = true;
  try {
    if (editing) {
      const { name, ...rest } = data;
      await api("PUT", `/v1/presets/${encodeURIComponent(editing)}`, rest);  // the whole form: a cleared setting goes
      say(formStatus, `Saved “${editing}”.`, "ok");
    } else {
      await api("POST", "/v1/presets", data);
      say(formStatus, `Created “${data.name}”.`, "ok");
    }
    endEdit();
    await loadPresets();
  } catch (err) {
    showFieldError(err, editing ? "Could not save" : "Could not create");
  } finally {
    saving = false;
  }
}

async function startEdit(preset) {
  editing = preset.name;
  const shown = new Set((FAMILY_SETTINGS[families[preset.model]] || []).map(([name]) => name));
  kept = Object.fromEntries(Object.entries(preset.settings).filter(([name]) => !shown.has(name)));
  $("form-h").textContent = `Edit preset “${preset.name}”`;
  $("p-name").value = preset.name;
  $("p-name").readOnly = true;
  $("p-save").textContent = "Save changes";
  $("p-cancel").hidden = false;
  $("p-model").value = preset.model;
  await loadVoiceChoices(preset.voice);
  setSpeed(preset.speed);
  showSettings(preset.settings);
  say(formStatus, "");
  $("p-model").focus();
}

function endEdit() {
  editing = null;
  kept = {};
  $("form-h").textContent = "New preset";
  $("p-name").readOnly = false;
  $("p-name").value = "";
  $("p-save").textContent = "Create preset";
  $("p-cancel").hidden = true;
  setSpeed(1);  // the next preset starts from the defaults, not from the last one's values
  showSettings();
  clearInvalid();
}

// Speak the sample sentence with a preset name or explicit settings; report in `where`.
// A Try that failed part way said "Could not speak: ..." at once while the audio that had come played
// on, with Try enabled again (found by a helper's review). As in the studio, what came plays out first,
// Try disabled ("Playing the 1.3 s that came before it failed…"), then the row says why it ended.
async function tryVoice(settings, where, button) {
  const text = $("sample").value.trim() || $("sample").defaultValue;
  if (speaker.current) { speaker.stop(); }
  if (endPlayback) endPlayback("superseded");  // (this Try's audio takes the player's place)
  button.disabled = true;
  say(where, "Speaking…", "busy");
  try {
    const { done } = await speaker.speak({ text, ...settings });
    say(where, `Spoke ${(done.audio_ms / 1000).toFixed(1)} s, TTFA ${fmtMs(done.ttfa_ms)}.`, "ok");
  } catch (err) {
    if (err.partial && !/^audio_/.test(err.code) && speaker.playerState !== "idle") {
      const cameMs = (1000 * err.partial.chunks.reduce((n, c) => n + c.length, 0)) / err.partial.sampleRate;
      say(where, `Playing the ${(cameMs / 1000).toFixed(1)} s that came before it failed…`, "busy");
      const ending = await new Promise((resolve) => { endPlayback = resolve; });
      endPlayback = null;
      sayError(where, err, ending === "ended" ? `Could not speak it all (the ${(cameMs / 1000).toFixed(1)} s `
        + "that came has played)" : "Could not speak");
    } else {
      sayError(where, err, "Could not speak");
    }
  } finally {
    button.disabled = false;
  }
}

function presetRow(preset) {
  const rowStatus = el("p", { class: "status small", role: "status" });
  const tryBtn = el("button", { type: "button", class: "small", text: "Try", "aria-label": `Try ${preset.name}` });
  tryBtn.addEventListener("click", () => tryVoice({ model: preset.model, voice: preset.name }, rowStatus, tryBtn));
  const editBtn = el("button", { type: "button", class: "small", text: "Edit", "aria-label": `Edit ${preset.name}` });
  editBtn.addEventListener("click", () => startEdit(preset).catch((err) => sayError(rowStatus, err)));
  const delBtn = el("button", { type: "button", class: "small danger", text: "Delete", "aria-label": `Delete ${preset.name}` });
  delBtn.addEventListener("click", async () => {
    if (!confirm(`Delete the preset “${preset.name}”?`)) return;
    try {
      await api("DELETE", `/v1/presets/${encodeURIComponent(preset.name)}`);
      if (editing === preset.name) endEdit();
      say(listStatus, `Deleted “${preset.name}”.`, "ok");
      await loadPresets();
      $("list-h").focus();
    } catch (err) {
      sayError(rowStatus, err, "Could not delete");
    }
  });
  const studio = el("a", { class: "button small", href: `/?voice=${encodeURIComponent(preset.name)}&model=${encodeURIComponent(preset.model)}`,
                           text: "Use in studio", "aria-label": `Use ${preset.name} in the studio` });
  return el("tr", { "data-preset": preset.name },
    el("th", { scope: "row", text: preset.name }),
    el("td", { class: "hide-narrow", text: preset.model }),
    el("td", {}, preset.voice, Object.keys(preset.settings).length
      ? el("span", { class: "muted small settings-summary",
                     text: ` · ${Object.entries(preset.settings).map(([k, v]) => `${k} ${v}`).join(", ")}` }) : null,
       preset.usable === false ? el("p", { class: "small problem", text: `Not usable: ${preset.problem}` }) : null),
    el("td", { text: `${preset.speed}×` }),
    el("td", {}, el("div", { class: "row-actions" }, tryBtn, editBtn, studio, delBtn), rowStatus));
}

let shownPresets = "";

async function loadPresets() {
  try {
    const { data } = await api("GET", "/v1/presets");
    const key = JSON.stringify(data);
    if (key === shownPresets) return;  // (drawing the rows again would take the keyboard from them)
    shownPresets = key;
    $("presets").replaceChildren(...data.map(presetRow));
    $("presets-empty").hidden = data.length > 0;
    if (editing && !data.some((p) => p.name === editing)) {
      say(formStatus, `“${editing}” is no longer there (deleted elsewhere?): the form makes a new preset.`, "error");
      endEdit();
    }
  } catch (err) {
    sayError(listStatus, err, "Could not load presets");
  }
}

// Presets made or deleted in another tab (or by the API) showed only after a reload, and a deleted
// one's Delete, Try and Edit failed: the list is read again when the page is seen again.
const seenAgain = () => { if (document.visibilityState === "visible") loadPresets(); };
document.addEventListener("visibilitychange", seenAgain);
window.addEventListener("focus", seenAgain);

$("preset-form").addEventListener("submit", save);
$("p-cancel").addEventListener("click", () => { endEdit(); say(formStatus, ""); });
$("p-speed").addEventListener("input", () => setSpeed($("p-speed").value));
$("p-model").addEventListener("change", () => {
  showSettings();
  loadVoiceChoices().catch((err) => sayError(formStatus, err));
});
$("p-try").addEventListener("click", async () => {
  const model = $("p-model").value, voice = $("p-voice").value, speed = Number($("p-speed").value);
  await tryVoice({ model, voice, speed }, formStatus, $("p-try"));
  const filled = [...document.querySelectorAll("[data-setting]")].some((i) => i.value.trim() || i.validity.badInput);
  if (filled) {  // a realtime session takes no family settings: only a saved preset carries them
    const status = formStatus.textContent;
    say(formStatus, `${status} The ${$("p-family").textContent} settings are not in this try: save the preset, `
                    + "then try it from the list.", formStatus.dataset.kind || "ok");
  }
});
document.addEventListener("voxgate:presets-changed", () => loadPresets());  // a designed voice was saved
fillModels($("p-model"), $("p-model").dataset.default)
  .then((models) => {
    families = Object.fromEntries(models.map((m) => [m.id, m.family]));
    showSettings();
    return loadVoiceChoices();
  })
  .catch((err) => sayError(formStatus, err, "Could not load models"));
loadPresets();
