// One take of a passage: listen, choose, delete, and edit its audio (trim silence at the
// ends, delete a selected range, undo). The waveform is drawn from the take's WAV; drag
// across it (or type the times) to select a range.
import { api, errorOf, fetchSigned, say, sayError, el, fmtDuration } from "./common.js";
import { Waveform } from "./waveform.js";
import { focusedPlace, refocus } from "./project-focus.js";

const WAV_HEADER_BYTES = 44;  // the server writes plain 44-byte PCM16 headers

export async function fetchPcm(url) {
  const res = await fetchSigned(url, { cache: "no-store" });
  if (!res.ok) throw await errorOf(res, url);
  const buf = await res.arrayBuffer();
  const rate = new DataView(buf).getUint32(24, true);
  return { pcm: new Int16Array(buf, WAV_HEADER_BYTES, (buf.byteLength - WAV_HEADER_BYTES) >> 1), rate };
}

// ctx: {projectId, reload(), status}; n: the passage's number (1-based), k: the take's.
export function takeItem(ctx, passage, take, n, k) {
  const label = `take ${k} of passage ${n}`;
  const version = `?v=${take.num_edits}-${Math.round(take.audio_ms)}`;
  const itemStatus = el("p", { class: "status small", role: "status" });
  const audio = el("audio", { controls: true, preload: "none", src: take.audio_url + version,
                              "aria-label": `Listen to ${label}` });
  const call = async (button, fn, failure) => {
    const place = focusedPlace(button);
    button.disabled = true;
    try {
      await fn();
      await ctx.reload();
    } catch (err) {
      button.disabled = false;
      sayError(itemStatus, err, failure);
    }
    refocus(place);
  };
  const choose = el("button", { type: "button", class: "small", text: take.chosen ? "Chosen" : "Choose",
                                disabled: take.chosen, "aria-pressed": take.chosen ? "true" : "false",
                                "aria-label": `Choose ${label}` });
  choose.addEventListener("click", () => call(choose, () => api("PATCH",
    `/v1/projects/${ctx.projectId}/passages/${passage.id}`, { chosen_take: take.id }), "Could not choose"));
  const edit = el("button", { type: "button", class: "small", text: "Edit", "aria-expanded": "false",
                              "aria-label": `Edit ${label}` });
  const del = el("button", { type: "button", class: "small danger", text: "Delete", disabled: take.chosen,
                             title: take.chosen ? "The chosen take cannot be deleted: choose another first" : null,
                             "aria-label": `Delete ${label}` });
  del.addEventListener("click", () => call(del, () => api("DELETE", `/v1/projects/${ctx.projectId}/takes/${take.id}`),
                                           "Could not delete"));
  const editor = el("div", { class: "take-editor", hidden: true });
  edit.addEventListener("click", () => {
    const open = editor.hidden;
    editor.hidden = !open;
    edit.setAttribute("aria-expanded", String(open));
    ctx.openEditors[take.id] = open;
    if (open && !editor.childElementCount) buildEditor(ctx, take, label, editor, itemStatus);
  });
  const meta = [fmtDuration(take.audio_ms), take.speaker, take.out_of_date ? "out of date" : null,
                take.num_edits ? `${take.num_edits} edit${take.num_edits === 1 ? "" : "s"}` : null]
    .filter(Boolean).join(" · ");
  const li = el("li", { class: `ptake${take.chosen ? " chosen" : ""}`, "data-take": take.id },
    el("div", { class: "take-actions" },
      el("span", { class: "take-label", text: `Take ${k}` }), audio,
      el("span", { class: "muted small", text: meta }), choose, edit, del),
    editor, itemStatus);
  if (ctx.openEditors[take.id]) edit.click();
  return li;
}

function buildEditor(ctx, take, label, editor, itemStatus) {
  const canvas = el("canvas", { class: "wave small-wave", role: "img", "aria-label": `Waveform of ${label}` });
  const start = el("input", { type: "number", min: "0", step: "10", "aria-label": `Selection start of ${label} (ms)` });
  const end = el("input", { type: "number", min: "0", step: "10", "aria-label": `Selection end of ${label} (ms)` });
  const trim = el("button", { type: "button", class: "small", text: "Trim silence", "aria-label": `Trim silence of ${label}` });
  const cut = el("button", { type: "button", class: "small", text: "Delete selection",
                             "aria-label": `Delete the selection of ${label}` });
  const undo = el("button", { type: "button", class: "small", text: "Undo", disabled: !take.num_edits,
                              "aria-label": `Undo the last edit of ${label}` });
  editor.append(canvas, el("div", { class: "take-actions" },
    el("label", { class: "small" }, "From ", start), el("label", { class: "small" }, "to ", end, " ms"), cut, trim, undo));
  const wave = new Waveform(canvas, { minSeconds: 0 });
  let rate = 24000;
  fetchPcm(take.audio_url + `?v=${take.num_edits}`).then(({ pcm, rate: r }) => {
    rate = r;
    wave.sampleRate = r;
    wave.add(pcm);
  }).catch((err) => sayError(itemStatus, err, "Could not draw the waveform"));
  const showSelection = () => {
    const a = Number(start.value), b = Number(end.value);
    wave.setSelection(end.value !== "" && b > a ? [Math.round((a * rate) / 1000), Math.round((b * rate) / 1000)] : null);
  };
  start.addEventListener("input", showSelection);
  end.addEventListener("input", showSelection);
  let anchor = null;
  canvas.addEventListener("pointerdown", (e) => { anchor = wave.sampleAt(e.offsetX); canvas.setPointerCapture(e.pointerId); });
  canvas.addEventListener("pointermove", (e) => {
    if (anchor == null) return;
    const here = wave.sampleAt(e.offsetX);
    start.value = Math.round((Math.min(anchor, here) * 1000) / rate);
    end.value = Math.round((Math.max(anchor, here) * 1000) / rate);
    showSelection();
  });
  canvas.addEventListener("pointerup", () => { anchor = null; });
  const editCall = async (button, body, what) => {
    const place = focusedPlace(button);
    button.disabled = true;
    say(itemStatus, `${what}…`, "busy");
    try {
      await api("POST", `/v1/projects/${ctx.projectId}/takes/${take.id}/edit`, body);
      await ctx.reload();
    } catch (err) {
      button.disabled = false;
      sayError(itemStatus, err, `Could not ${what.toLowerCase()}`);
    }
    refocus(place);
  };
  trim.addEventListener("click", () => editCall(trim, { op: "trim_silence" }, "Trim silence"));
  cut.addEventListener("click", () => {
    if (start.value === "" || end.value === "") { say(itemStatus, "Select a range first: drag across the waveform.", "error"); return; }
    editCall(cut, { op: "delete_range", start_ms: Number(start.value), end_ms: Number(end.value) }, "Delete the selection");
  });
  undo.addEventListener("click", () => editCall(undo, { op: "undo" }, "Undo"));
}
