// Reference voices (/v1/voices/references): list, play, delete, and add one from a file or
// a microphone recording. Each row's "Speak with" button is static/clone.js's (a Base model).
import { $, api, say, sayError, el, fmtDuration } from "./common.js";
import { FieldErrors } from "./field-errors.js";
import { Recorder } from "./recorder.js";

const form = $("ref-form");
const MAX_S = Number(form.dataset.maxS);
const listStatus = $("refs-status");
const formStatus = $("ref-form-status");
const player = $("ref-player");
const errors = new FieldErrors({
  name: { input: $("r-name"), error: $("r-name-err"), label: "The name" },
  transcript: { input: $("r-transcript"), error: $("r-transcript-err"), label: "The transcript" },
  audio: { input: $("r-audio"), error: $("r-audio-err"), label: "The recording" },
}, formStatus);
let recorder = null;
let recording = null;  // { blob, seconds }: the last recording, uploaded instead of a file
let previewUrl = null;
let playing = null;    // { name, status, button } of the row being played

function play(ref, rowStatus, button) {
  if (playing) stopPlaying();
  playing = { name: ref.name, status: rowStatus, button };
  player.src = ref.audio_url;
  button.textContent = "Stop";
  button.setAttribute("aria-label", `Stop ${ref.name}`);
  say(rowStatus, "Playing…", "busy");
  player.play().catch((err) => { sayError(rowStatus, err, "Could not play"); stopPlaying(false); });
}

function stopPlaying(clear = true) {
  if (!playing) return;
  player.pause();
  playing.button.textContent = "Play";
  playing.button.setAttribute("aria-label", `Play ${playing.name}`);
  if (clear) say(playing.status, "");
  playing = null;
}

player.addEventListener("ended", () => {
  if (!playing) return;
  const { status } = playing;
  const seconds = player.duration;
  stopPlaying(false);
  say(status, `Played ${seconds.toFixed(1)} s.`, "ok");
});

function referenceRow(ref) {
  const rowStatus = el("p", { class: "status small", role: "status" });
  const playBtn = el("button", { type: "button", class: "small", text: "Play", "aria-label": `Play ${ref.name}` });
  playBtn.addEventListener("click", () => (playing && playing.name === ref.name ? stopPlaying()
                                                                                : play(ref, rowStatus, playBtn)));
  const delBtn = el("button", { type: "button", class: "small danger", text: "Delete",
                                "aria-label": `Delete ${ref.name}` });
  delBtn.addEventListener("click", async () => {
    if (!confirm(`Delete the reference voice “${ref.name}”?`)) return;
    try {
      if (playing && playing.name === ref.name) stopPlaying();
      await api("DELETE", `/v1/voices/references/${encodeURIComponent(ref.name)}`);
      say(listStatus, `Deleted “${ref.name}”.`, "ok");
      await loadReferences();
      $("refs-h").focus();
    } catch (err) {
      sayError(rowStatus, err, "Could not delete");
    }
  });
  const speakBtn = el("button", { type: "button", class: "small speak", text: "Speak with this voice",
                                  "aria-label": `Speak with ${ref.name}`, "data-voice": ref.name });
  speakBtn.hidden = !document.body.dataset.canClone;  // static/clone.js: a Base model is installed
  return el("tr", { "data-reference": ref.name },
    el("th", { scope: "row", text: ref.name }),
    el("td", { class: "transcript" }, ref.transcript,
       ref.usable === false ? el("p", { class: "small problem", text: `Not usable: ${ref.problem}` }) : null),
    el("td", { text: fmtDuration(ref.audio_ms) }),
    el("td", {}, el("div", { class: "row-actions" }, playBtn, speakBtn, delBtn), rowStatus));
}

async function loadReferences() {
  try {
    const { data } = await api("GET", "/v1/voices/references");
    if (playing && !data.some((r) => r.name === playing.name)) stopPlaying();
    $("refs").replaceChildren(...data.map(referenceRow));
    $("refs-empty").hidden = data.length > 0;
  } catch (err) {
    sayError(listStatus, err, "Could not load reference voices");
  }
}

function showRecording(rec) {
  recording = rec;
  if (previewUrl) URL.revokeObjectURL(previewUrl);
  previewUrl = rec ? URL.createObjectURL(rec.blob) : null;
  $("r-preview").hidden = !rec;
  $("r-discard").hidden = !rec;
  if (rec) {
    $("r-preview").src = previewUrl;
    $("r-audio").value = "";  // the recording is what will be uploaded
  } else {
    $("r-preview").removeAttribute("src");
    $("r-elapsed").textContent = "0.0 s";
  }
}

async function startRecording() {
  errors.clear();
  showRecording(null);
  recorder = new Recorder({
    maxSeconds: MAX_S,
    onTick: (s) => { $("r-elapsed").textContent = `${s.toFixed(1)} s`; },
    onStop: (blob, seconds) => {
      recorder = null;
      $("r-record").disabled = false;
      $("r-stop").disabled = true;
      showRecording({ blob, seconds });
      say(formStatus, seconds >= MAX_S ? `Recorded ${seconds.toFixed(1)} s: the limit, so recording stopped.`
                                       : `Recorded ${seconds.toFixed(1)} s.`, "ok");
      $("r-record").focus();
    },
  });
  $("r-record").disabled = true;
  try {
    await recorder.start();
  } catch (err) {
    recorder = null;
    $("r-record").disabled = false;
    const why = err && err.name === "NotAllowedError" ? "the browser was not allowed to use the microphone"
      : err && err.name === "NotFoundError" ? "no microphone was found"
      : String(err && err.message || err);
    say($("r-audio-err"), `Could not record: ${why}.`);
    return;
  }
  $("r-stop").disabled = false;
  $("r-stop").focus();
  say(formStatus, "Recording…", "busy");
}

async function upload(e) {
  e.preventDefault();
  errors.clear();
  if (recorder) {  // still recording: what was recorded so far is the recording to send
    const current = recorder;
    current.stop();
    await current.done;
  }
  const body = new FormData();
  body.append("name", $("r-name").value.trim());
  body.append("transcript", $("r-transcript").value);
  const file = $("r-audio").files[0];
  if (recording) body.append("audio", recording.blob, "recording.wav");
  else if (file) body.append("audio", file, file.name);
  $("r-save").disabled = true;
  say(formStatus, "Uploading…", "busy");
  try {
    const ref = await api("POST", "/v1/voices/references", body);
    say(formStatus, `Added “${ref.name}” (${fmtDuration(ref.audio_ms)}).`, "ok");
    form.reset();
    showRecording(null);
    await loadReferences();
  } catch (err) {
    errors.show(err, "Could not add the reference voice");
  } finally {
    $("r-save").disabled = false;
  }
}

form.addEventListener("submit", upload);
$("r-record").addEventListener("click", startRecording);
$("r-stop").addEventListener("click", () => recorder && recorder.stop());
$("r-discard").addEventListener("click", () => { showRecording(null); say(formStatus, ""); $("r-record").focus(); });
$("r-audio").addEventListener("change", () => { if ($("r-audio").files.length) showRecording(null); });
loadReferences();
