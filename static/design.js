// Design a voice: a Qwen3-TTS VoiceDesign model speaks a sample in a voice made from a
// description (POST /v1/audio/design); the description can be kept as a preset's
// `instructions` setting. Only models whose `model_type` (GET /v1/models) is voice_design.
import { $, api, apiBlob, ApiError, say } from "./common.js";
import { FieldErrors } from "./field-errors.js";

const status = $("design-status");
const errors = new FieldErrors({
  model: { input: $("d-model"), error: $("d-model-err"), label: "The model" },
  instruct: { input: $("d-instruct"), error: $("d-instruct-err"), label: "The description" },
  input: { input: $("d-text"), error: $("d-text-err"), label: "The sample text" },
}, status);
const presetErrors = new FieldErrors({
  name: { input: $("d-preset"), error: $("d-preset-err"), label: "The preset name" },
  model: { input: $("d-model"), error: $("d-model-err"), label: "The model" },
  "settings.instructions": { input: $("d-instruct"), error: $("d-instruct-err"), label: "The description" },
}, status);
let models = [];   // the VoiceDesign models
let audioUrl = null;
window.voxgate = Object.assign(window.voxgate || {}, { designed: 0 });  // takes heard to the end (tests)

async function hear(e) {
  e.preventDefault();
  errors.clear();
  presetErrors.clear();
  const body = { model: $("d-model").value, instruct: $("d-instruct").value, input: $("d-text").value,
                 response_format: "wav" };
  $("d-hear").disabled = true;
  say(status, "Designing…", "busy");
  try {
    const blob = await apiBlob("POST", "/v1/audio/design", body);
    if (audioUrl) URL.revokeObjectURL(audioUrl);
    audioUrl = URL.createObjectURL(blob);
    const audio = $("d-audio");
    audio.src = audioUrl;
    audio.hidden = false;
    await audio.play();
    say(status, "Playing the designed voice. Save it as a preset below to use it in the studio.", "ok");
  } catch (err) {
    errors.show(err, "Could not design the voice");
  } finally {
    $("d-hear").disabled = false;
  }
}

async function save() {
  errors.clear();
  presetErrors.clear();
  const model = models.find((m) => m.id === $("d-model").value);
  const instructions = $("d-instruct").value.trim();
  if (!instructions) {  // an empty description would make a preset with no voice of its own
    presetErrors.show(new ApiError(400, "invalid_input", "instructions is empty: describe the voice first",
                                   "settings.instructions"), "Could not save");
    return;
  }
  const preset = { name: $("d-preset").value.trim(), model: model ? model.id : $("d-model").value,
                   voice: model && model.voices.length ? model.voices[0] : "default",
                   settings: { instructions } };
  try {
    await api("POST", "/v1/presets", preset);
    say(status, `Saved the preset “${preset.name}”.`, "ok");
    document.dispatchEvent(new CustomEvent("voxgate:presets-changed"));
  } catch (err) {
    presetErrors.show(err, "Could not save the preset");
  }
}

async function init() {
  const { data } = await api("GET", "/v1/models");
  models = data.filter((m) => m.model_type === "voice_design");
  $("d-model").replaceChildren(...models.map((m) => new Option(m.name === m.id ? m.id : `${m.name} (${m.id})`, m.id)));
  $("d-none").hidden = models.length > 0;
  $("design-form").hidden = models.length === 0;
}

$("design-form").addEventListener("submit", hear);
$("d-save").addEventListener("click", save);
$("d-audio").addEventListener("ended", () => {  // heard to the end
  window.voxgate.designed += 1;
  say(status, `Played the designed voice (${$("d-audio").duration.toFixed(1)} s). Save it as a preset below to `
              + "use it in the studio.", "ok");
});
init().catch((err) => say(status, `Could not load models: ${err.message}`, "error"));
