// Speak with a reference voice: a Qwen3-TTS Base model clones it (POST /v1/audio/clone with
// the voice's name, multipart). Offered only when GET /v1/models lists a model whose
// model_type is base; each reference row's "Speak with this voice" button (static/references.js)
// speaks the text of this form in that voice.
import { $, api, apiBlob, say } from "./common.js";
import { FieldErrors } from "./field-errors.js";

const status = $("clone-status");
const errors = new FieldErrors({
  model: { input: $("c-model"), error: $("c-model-err"), label: "The model" },
  text: { input: $("c-text"), error: $("c-text-err"), label: "The text" },
}, status);
let audioUrl = null;
let speaking = null;  // the voice whose take is playing
window.voxgate = Object.assign(window.voxgate || {}, { cloned: 0 });  // takes heard to the end (tests)

async function speak(voice, button) {
  errors.clear();
  const body = new FormData();
  body.append("model", $("c-model").value);
  body.append("voice", voice);
  body.append("text", $("c-text").value);
  body.append("response_format", "wav");
  button.disabled = true;
  say(status, `Speaking with “${voice}”…`, "busy");
  try {
    const blob = await apiBlob("POST", "/v1/audio/clone", body);
    if (audioUrl) URL.revokeObjectURL(audioUrl);
    audioUrl = URL.createObjectURL(blob);
    const audio = $("c-audio");
    audio.src = audioUrl;
    audio.hidden = false;
    speaking = voice;
    await audio.play();
    say(status, `Playing “${voice}”.`, "ok");
  } catch (err) {
    errors.show(err, `Could not speak with “${voice}”`);
  } finally {
    button.disabled = false;
  }
}

async function init() {
  const { data } = await api("GET", "/v1/models");
  const models = data.filter((m) => m.model_type === "base");
  $("c-model").replaceChildren(...models.map((m) => new Option(m.name === m.id ? m.id : `${m.name} (${m.id})`,
                                                                m.id)));
  const canClone = models.length > 0;
  $("clone-form").hidden = !canClone;
  $("c-none").hidden = canClone;
  if (canClone) document.body.dataset.canClone = "1";
  else delete document.body.dataset.canClone;
  for (const button of document.querySelectorAll("#refs button.speak")) button.hidden = !canClone;
  // rows drawn after this (a new upload, a reload of the list) read body[data-can-clone]
}

$("refs").addEventListener("click", (e) => {
  const button = e.target.closest("button.speak");
  if (button) speak(button.dataset.voice, button);
});
$("c-audio").addEventListener("ended", () => {
  window.voxgate.cloned += 1;
  say(status, `Played “${speaking}” (${$("c-audio").duration.toFixed(1)} s).`, "ok");
});
$("clone-form").addEventListener("submit", (e) => e.preventDefault());
init().catch((err) => say(status, `Could not load models: ${err.message}`, "error"));
