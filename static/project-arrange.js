// Arrange: one row per join between passages whose chosen takes exist. Each shows the end
// of the first take, the pause (shaded) and the start of the next as one waveform, with
// the pause to change (-/+ 100 ms, an exact value, reset to the project's) and a button
// that plays across the join (GET .../passages/{id}/join renders it on the server).
import { api, errorOf, fetchSigned, say, sayError, el } from "./common.js";
import { Waveform } from "./waveform.js";
import { fetchPcm } from "./project-takes.js";
import { focusedPlace, refocus } from "./project-focus.js";

const STEP_MS = 100;
const CONTEXT_MS = 2000;

export function joinItem(ctx, project, passage, next, n) {
  const joinStatus = el("p", { class: "status small", role: "status" });
  const label = `the join after passage ${n}`;
  const input = el("input", { type: "number", min: "0", max: "10000", step: "10", value: String(passage.pause_after_ms),
                              "aria-label": `Pause after passage ${n} (ms)` });
  const minus = el("button", { type: "button", class: "small", text: "−", "aria-label": `Shorten the pause after passage ${n}` });
  const plus = el("button", { type: "button", class: "small", text: "+", "aria-label": `Lengthen the pause after passage ${n}` });
  const reset = el("button", { type: "button", class: "small", text: "Reset", disabled: passage.pause_ms == null,
                               "aria-label": `Reset the pause after passage ${n} to the project's ${project.pause_ms} ms` });
  const play = el("button", { type: "button", class: "small", text: "Play across the join",
                              "aria-label": `Play across ${label}` });
  const audio = el("audio", { preload: "none" });
  const canvas = el("canvas", { class: "wave small-wave", role: "img", "aria-label": `Waveform of ${label}` });
  const url = `/v1/projects/${ctx.projectId}/passages/${passage.id}/join?context_ms=${CONTEXT_MS}`;
  const version = `&pause=${passage.pause_after_ms}&a=${passage.chosen_take}&b=${next.chosen_take}`;
  const wave = new Waveform(canvas, { minSeconds: 0 });
  fetchSigned(url + version, { cache: "no-store" }).then(async (res) => {
    if (!res.ok) throw await errorOf(res, "The join");
    const at = Number(res.headers.get("X-Voxgate-Pause-At-Ms"));
    const pause = Number(res.headers.get("X-Voxgate-Pause-Ms"));
    const blob = await res.blob();
    audio.src = URL.createObjectURL(blob);
    const { pcm, rate } = await fetchPcm(audio.src);
    wave.sampleRate = rate;
    wave.shades = [[Math.round((at * rate) / 1000), Math.round(((at + pause) * rate) / 1000)]];
    wave.add(pcm);
  }).catch((err) => sayError(joinStatus, err, "Could not load the join"));
  // A join is drawn again only when the project changed: a refused pause, or the one it had (− at
  // 0 ms), leaves this one, whose buttons come back as they were (the passage's pause is unchanged).
  const setPause = async (value) => {
    const place = focusedPlace();
    for (const b of [minus, plus, reset]) b.disabled = true;
    try {
      await api("PATCH", `/v1/projects/${ctx.projectId}/passages/${passage.id}`, { pause_ms: value });
      await ctx.reload();
    } catch (err) {
      sayError(joinStatus, err, "Could not change the pause");
    } finally {
      for (const b of [minus, plus]) b.disabled = false;
      reset.disabled = passage.pause_ms == null;
      refocus(place);
    }
  };
  minus.addEventListener("click", () => setPause(Math.max(0, passage.pause_after_ms - STEP_MS)));
  plus.addEventListener("click", () => setPause(Math.min(10000, passage.pause_after_ms + STEP_MS)));
  reset.addEventListener("click", () => setPause(null));
  input.addEventListener("change", () => {
    if (input.value === "" || !Number.isFinite(Number(input.value))) { say(joinStatus, "Type a number of milliseconds.", "error"); return; }
    setPause(Number(input.value));
  });
  play.addEventListener("click", async () => {
    try {
      audio.currentTime = 0;
      await audio.play();
    } catch (err) {
      sayError(joinStatus, err, "Could not play");
    }
  });
  audio.addEventListener("play", () => { window.voxgate.joinPlaying = passage.id; });
  audio.addEventListener("timeupdate", () => wave.setPlayhead(audio.currentTime * wave.sampleRate));
  audio.addEventListener("ended", () => { window.voxgate.joinPlayed = passage.id; window.voxgate.joinPlaying = null; });
  return el("li", { class: "join", "data-join": passage.id },
    el("p", { class: "small join-title", text: `Passage ${n} → ${n + 1}` }), canvas,
    el("div", { class: "take-actions" }, minus, input, el("span", { class: "small", text: "ms" }), plus, reset, play),
    audio, joinStatus);
}
