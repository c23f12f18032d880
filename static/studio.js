// Studio: speak text over /v1/realtime, watch the waveform arrive, keep takes.
import { $, api, say, sayError, fmtMs, fmtDuration, fillModels, fillVoices, signedInScope } from "./common.js";
import { head, keepTake, loadTakes } from "./studio-takes.js";
import { Speaker } from "./speaker.js";
import { keepDraft, restoreDraft } from "./draft.js";
import { onMediaPlay, pauseMedia } from "./players.js";
import { Waveform } from "./waveform.js";

const status = $("status");
const wave = new Waveform($("wave"));
let presetSpeeds = {};
let families = {};  // model id -> family (GET /v1/models)
const SPEED_FAMILIES = JSON.parse($("speed").dataset.families);
let endPlayback = null;  // resolves the wait for playback to end: "ended" or "stopped"
let waiting = null;  // the Speak waiting for its first audio ({model}), else null
let audioFailure = null;  // why the sound stopped under the take playing out (Speaker's onAudioError)

// For tests and the curious: the take in progress and the last one done.
window.voxgate = { playedMs: 0, positionReports: 0, lastDone: null, playerState: "idle", takes: 0, lastKept: null,
                  loadingSeen: null };

// The sound failing (a device lost) while a take plays out ends it, said once by speakTake; one
// still being synthesised is rejected with the same error, said by speakTake's catch.
const speaker = new Speaker({
  onStart: () => { waiting = null; say(status, "Playing…", "busy"); },
  onAudioError: (err) => {
    audioFailure = err;
    if (endPlayback) endPlayback("failed");
  },
  onAudio: (pcm) => wave.add(pcm),
  onPosition: (playedMs, msg) => {
    window.voxgate.playedMs = playedMs;
    window.voxgate.playerState = msg.state;
    window.voxgate.positionReports = speaker.numReports;
    window.voxgate.underruns = msg.underruns;
    wave.setPlayhead((playedMs / 1000) * speaker.ctx.sampleRate);
    $("played").textContent = fmtDuration(playedMs);
    if (msg.state === "idle" && !speaker.current) {
      if (endPlayback) endPlayback("ended");
      else setBusy(false);
    }
  },
});

// The counter is the text field's description (read with it), not a live region: one announcement
// a keystroke drowned what was typed (found by a screen-reader trial). Reaching the limit is said once.
function updateCount() {
  const n = $("text").value.length;
  const max = Number($("text").dataset.max);
  $("count-n").textContent = n;
  const full = n >= max;
  if (full && $("count").dataset.kind !== "error" && document.activeElement === $("text")
      && !/^The text was cut/.test(status.textContent)) {  // (a paste past the limit says so itself)
    say(status, `The text is at the ${max}-character limit of one request.`, "error");
  }
  $("count").dataset.kind = full ? "error" : "";
}

// The button pressed disables itself: the keyboard moves to the other one, not to <body>.
function setBusy(busy) {
  const from = document.activeElement;
  $("speak").disabled = busy;
  $("stop").disabled = !busy;
  if (busy && from === $("speak")) $("stop").focus();
  else if (!busy && (from === $("stop") || from === document.body)) $("speak").focus();
}

// keep: the selection stays where it is still offered; returns the one that no longer is (else null).
// A preset's speed stayed on the slider once the preset gave way (deleted in another tab: found by a
// new-user trial): the slider goes back to its default when the preset selected is replaced.
async function loadVoices({ keep = false } = {}) {
  const before = $("voice").value;
  const fromPreset = before in presetSpeeds;
  const data = await fillVoices($("voice"), $("model").value);
  presetSpeeds = Object.fromEntries(data.filter((v) => v.kind === "preset").map((v) => [v.id, v.speed]));
  let gone = null;
  if (keep && before) {
    if (data.some((v) => v.id === before)) $("voice").value = before;
    else gone = before;
  }
  if (fromPreset && $("voice").value !== before) setSpeed($("speed").defaultValue);
  return gone;
}

// Presets and takes made or deleted in another tab were not seen until a reload (found by a
// new-user trial): both lists are read again when the page is seen again.
// So are the models (a model installed or removed in another tab was missing, or offered and refused,
// until a reload: new-user trial), first, as the voices are the model's.
let refreshing = null;
function refreshLists() {
  if (document.visibilityState !== "visible" || refreshing || !$("model").value) return;
  refreshing = Promise.all([
    loadModels({ keep: true }).then(async (goneModel) => {
      const gone = await loadVoices({ keep: true });
      if (goneModel) {
        say(status, `The model "${goneModel}" is no longer installed (removed elsewhere?): the model is now `
                    + `"${$("model").value}", the voice "${$("voice").value}".`);
      } else if (gone) {
        say(status, `"${gone}" is no longer offered (deleted elsewhere?): the voice is now "${$("voice").value}".`);
      }
    }).catch((err) => sayError(status, err, "Could not load models and voices")),
    loadTakes(),
  ]).finally(() => { refreshing = null; });
}

// keep: the selection stays where it is still offered; returns the one that no longer is (else null).
async function loadModels({ keep = false } = {}) {
  const before = $("model").value;
  const preferred = keep && before ? before : new URLSearchParams(location.search).get("model") || $("model").dataset.default;
  const models = await fillModels($("model"), preferred);
  families = Object.fromEntries(models.map((m) => [m.id, m.family]));
  applySpeedControl();
  return keep && before && $("model").value !== before ? before : null;
}

// Takes are an admin key's: signed in with a speech key, each save was refused after the audio
// played (found by a new-user trial). Keep takes goes off, saying why; asked again at each Speak,
// as the dialog may have signed in since the page loaded.
function applyScope() {
  const speechOnly = signedInScope() === "speech";
  if (speechOnly && !$("keep").disabled) $("keep").checked = false;
  if (!speechOnly && $("keep").disabled) $("keep").checked = keepWanted();
  $("keep").disabled = speechOnly;
  $("keep-note").hidden = !speechOnly;
}

// Keep takes as the user left it, in this browser (localStorage): unchecked, it came back checked at
// the next visit, and every take was kept again (found by a studio-user trial). Checked by default.
const KEEP_KEY = "voxgate.studio.keep";

function keepWanted() {
  try { return localStorage.getItem(KEEP_KEY) !== "off"; } catch { return true; /* storage off */ }
}

function rememberKeep() {
  try {
    if ($("keep").checked) localStorage.removeItem(KEEP_KEY);
    else localStorage.setItem(KEEP_KEY, "off");
  } catch { /* storage off or full: this visit only */ }
}

// The speech LMs speak at their own pace (the API answers `X-Voxgate-Speed: ignored`): the slider
// was live for them and the take said 2× (found by a new-user trial). Off, with a note, and 1×.
function speedApplies() {
  const family = families[$("model").value];
  return !family || SPEED_FAMILIES.includes(family);
}

function applySpeedControl() {
  const off = !speedApplies();
  $("speed").disabled = off;
  $("speed-note").hidden = !off;
  if (off) {
    $("speed").setAttribute("aria-describedby", "speed-note");
    setSpeed(1);
  } else {
    $("speed").removeAttribute("aria-describedby");
  }
}

function setSpeed(value) {
  $("speed").value = value;
  $("speed-out").textContent = `${Number(value).toFixed(2)}×`;
}

// A take is kept once it has played (or, stopped, what was heard): a reload or another page before
// then lost it unsaid (found by a new-user trial). While one plays with Keep takes on, the browser
// asks first. (What was heard is not sent on pagehide: a keepalive request carries 64 KB, ~1.3 s.)
function warnBeforeLeaving(event) {
  if (!$("keep").checked || $("keep").disabled) return;
  event.preventDefault();
  event.returnValue = "";  // (older browsers ask only when it is set)
}

// A model not loaded yet is loaded by the Speak that needs it (Piper ~2-5 s, a speech LM longer), and
// that wait said "Synthesising…" with no sign why (found by a new-user trial). GET /v1/models/{id} says
// whether the model is loaded: until it is (or the first audio comes, or the Speak ends), the status
// says it is loading, once (a live region re-read at every poll would drown the page). Asked at once,
// then less and less often: every 0.4 s for as long as a load took was 150 requests for a minute's load
// (the server has no event stream for loads; the first audio ends the wait anyway).
const LOAD_POLL_MS = 400;
const LOAD_POLL_MAX_MS = 2000;
async function watchLoad(wait) {
  let said = false;
  let delay = LOAD_POLL_MS;
  for (;;) {
    let model;
    try {
      model = await api("GET", `/v1/models/${encodeURIComponent(wait.model)}`);
    } catch {
      return;  // (the Speak says what went wrong, if anything did)
    }
    if (waiting !== wait) return;
    if (model.loaded) {
      if (said) say(status, "Synthesising…", "busy");
      return;
    }
    if (!said) {
      say(status, `Loading the model ${wait.model}… (the first request to a model loads it; the audio follows)`, "busy");
      window.voxgate.loadingSeen = wait.model;
      said = true;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 1.5, LOAD_POLL_MAX_MS);
    if (waiting !== wait) return;
  }
}

async function speak() {
  window.addEventListener("beforeunload", warnBeforeLeaving);
  try {
    await speakTake();
  } finally {
    window.removeEventListener("beforeunload", warnBeforeLeaving);
  }
}

async function speakTake() {
  const text = $("text").value;
  if (!/[\p{L}\p{N}\p{Extended_Pictographic}]/u.test(text)) {  // (emoji: the server's text_emoji decides)
    say(status, "Type some text to speak first (letters or digits).", "error");
    $("text").focus();
    return;
  }
  const settings = { text, model: $("model").value, voice: $("voice").value,
                     speed: speedApplies() ? Number($("speed").value) : null };  // (null: the take says 1×)
  applyScope();
  pauseMedia();  // one player at a time: a take's replay gives way to the new take
  setBusy(true);
  wave.reset();
  for (const id of ["ttfa", "stalls", "audio-ms", "played"]) $(id).textContent = "–";
  say(status, "Synthesising…", "busy");
  const wait = { model: settings.model };
  waiting = wait;
  watchLoad(wait);
  let result;
  let failure = null;  // what ended a take part way, after some of its audio came
  try {
    result = await speaker.speak(settings);
  } catch (err) {
    if (err.code === "stopped") return;  // (Stop before the text went: stop() has said so)
    waiting = null;
    if (err.partial) {  // (audio came first: the take ends as below, what came played out, then said)
      failure = err;
      result = partialResult(err.partial);
    } else {
      setBusy(false);
      say(status, failureText(err), "error");
      if (err.field === "session.voice") {  // (e.g. a preset deleted in another tab): offer what there is now
        await loadVoices({ keep: true }).catch(() => {});
        status.append(" The voices and presets are read again.");
      }
      return;
    }
  }
  const { done } = result;
  waiting = null;
  applyScope();  // (a sign-in the Speak led to may have come since)
  window.voxgate.lastDone = done;
  $("ttfa").textContent = fmtMs(done.ttfa_ms);
  $("stalls").textContent = done.stalls == null ? "–" : String(done.stalls);  // (null: the server never said)
  $("audio-ms").textContent = fmtDuration(done.audio_ms);
  // "Done" is said when the listener has heard it all, not when synthesis ends; a take
  // stopped part way keeps only what was heard. One that failed part way (the connection lost, its
  // synthesis failed) plays what came first, then says why it ended: the error was said at once, with
  // Speak enabled while the audio played on, and what was heard was not kept (found by a helper's review).
  let ending = done.cancelled ? "stopped" : failure && /^audio_/.test(failure.code) ? "failed" : "ended";
  if (ending === "ended" && speaker.playerState !== "idle") {
    say(status, failure ? `Playing the ${fmtDuration(done.audio_ms)} that came before the take failed…`
      : `Playing… (all ${fmtDuration(done.audio_ms)} synthesised)`, "busy");
    ending = await new Promise((resolve) => { endPlayback = resolve; });
    endPlayback = null;
  }
  // (stopped: where the player was at the Stop, not its latest report, up to 200 ms before)
  const heardMs = Math.min(ending === "stopped" ? await speaker.stoppedAtMs() : speaker.playedMs, done.audio_ms);
  setBusy(false);
  const kept = $("keep").checked && heardMs > 0;
  const heard = fmtDuration(heardMs);
  const keepHeard = () => keepTake(settings, { ...result, chunks: head(result.chunks, Math.round((heardMs / 1000) * result.sampleRate)) });
  if (ending === "failed" || (failure && ending === "ended")) {  // (the sound went, or what came has played)
    say(status, (ending === "failed" ? audioFailure.message : failureText(failure))
      + (kept ? ` The take keeps the ${heard} heard.` : ""), "error");
    if (kept) await keepHeard();
    return;
  }
  if (ending === "stopped") {
    // (stopped before any audio, e.g. while the model loaded: it said "Stopped after 0.0 s of 0.0 s.")
    const stopped = !done.audio_ms && !heardMs ? "Stopped before any audio came." :
      `Stopped after ${heard} of ${fmtDuration(done.audio_ms)}${failure ? " that came" : ""}`
      + (kept ? `; the take keeps the ${heard} heard.` : ".");
    // (a Stop while what came before a failure played: the failure is said too)
    say(status, failure && !done.cancelled ? `${failureText(failure)} ${stopped}` : stopped);
    if (kept) await keepHeard();
    return;
  }
  say(status, `Done: ${fmtDuration(done.audio_ms)} of audio, TTFA ${fmtMs(done.ttfa_ms)}, ${done.stalls} stall${done.stalls === 1 ? "" : "s"}.`, "ok");
  if ($("keep").checked && result.chunks.length) await keepTake(settings, result);
}

// Why a take failed, as a sentence. (The sound's own errors say what happened in full: "Error: " would
// only make them longer.)
function failureText(err) {
  const text = /^audio_/.test(err.code) ? err.message : `${err.field ? `Error (${err.field})` : "Error"}: ${err.message}`;
  return /[.!?]$/.test(text) ? text : `${text}.`;
}

// The take so far of a Speak that failed part way (speaker.js: `err.partial`), as a result to end. No
// utterance.done came: its TTFA is the one this page measured, its stalls unknown (null, shown "–"): it
// said "0" stalls and no TTFA though audio had come (found by a helper's review).
function partialResult({ chunks, sampleRate, stopped, clientTtfaMs }) {
  const audioMs = (1000 * chunks.reduce((n, c) => n + c.length, 0)) / sampleRate;
  return { chunks, sampleRate, clientTtfaMs,
           done: { type: "utterance.done", utterance_id: null, audio_ms: audioMs, ttfa_ms: clientTtfaMs,
                   stalls: null, cancelled: stopped } };
}

function stop() {
  waiting = null;
  speaker.stop();
  if (endPlayback) { endPlayback("stopped"); return; }  // speak() says what was kept
  setBusy(false);
  say(status, "Stopped.");
}

// -- wiring -------------------------------------------------------------------------

$("takes-h").tabIndex = -1;
$("text").addEventListener("input", () => {
  updateCount();
  keepDraft($("text"));
  const fixed = /^Type some text/.test(status.textContent)
    || (/^The text is at the/.test(status.textContent) && $("count").dataset.kind !== "error");
  if (status.dataset.kind === "error" && fixed) say(status, "");
});
// A paste past the limit is cut by the field's maxlength: say so, rather than drop the rest unseen.
$("text").addEventListener("paste", (e) => {
  const t = $("text"), max = Number(t.dataset.max);
  const pasted = (e.clipboardData && e.clipboardData.getData("text")) || "";
  const after = t.value.length - (t.selectionEnd - t.selectionStart) + pasted.length;
  if (after > max) {
    say(status, `The text was cut to ${max} characters, the most one request speaks (${after - max} left out); `
                + "a project (Projects) speaks longer texts.", "error");
  }
});
window.addEventListener("pageshow", updateCount);  // text the browser restored (Back) has its own count
$("speed").addEventListener("input", () => setSpeed($("speed").value));
$("model").addEventListener("change", () => {
  applySpeedControl();
  loadVoices().catch((err) => sayError(status, err, "Could not load voices"));
});
$("voice").addEventListener("change", () => {
  if ($("voice").value in presetSpeeds && speedApplies()) setSpeed(presetSpeeds[$("voice").value]);
});
$("speak").addEventListener("click", () => speak().catch((err) => { setBusy(false); sayError(status, err); }));
$("stop").addEventListener("click", stop);
onMediaPlay(() => { if (!$("stop").disabled) stop(); });  // a take's replay stops the live take (what was heard is kept)
// Escape stops what plays, as Stop does (there was no keyboard way but Tab to Stop: new-user trial),
// and a take's replay too; not while a dialog is open (its own Escape closes it) or a control used it.
document.addEventListener("keydown", (e) => {
  if (e.key !== "Escape" || e.defaultPrevented || e.isComposing || document.querySelector("dialog[open]")) return;
  const replaying = [...document.querySelectorAll("audio")].some((a) => !a.paused);  // (the takes' players)
  if ($("stop").disabled && !replaying) return;
  e.preventDefault();
  pauseMedia();
  if (!$("stop").disabled) stop();
});
$("text").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("speak").disabled) { e.preventDefault(); $("speak").click(); }
});
restoreDraft($("text"));
updateCount();
setSpeed(1);
$("keep").checked = keepWanted();
$("keep").addEventListener("change", rememberKeep);
applyScope();
new ResizeObserver(() => wave.draw()).observe($("wave"));
loadModels()
  .then(() => loadVoices())
  .then(() => {
    const preset = new URLSearchParams(location.search).get("voice");
    if (preset && [...$("voice").options].some((o) => o.value === preset)) {
      $("voice").value = preset;
      $("voice").dispatchEvent(new Event("change"));
    }
  })
  .catch((err) => sayError(status, err, "Could not load models"));
loadTakes();
document.addEventListener("visibilitychange", refreshLists);
window.addEventListener("focus", refreshLists);
