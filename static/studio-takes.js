// The studio's takes: kept when played (or stopped: what was heard), listed, replayed, downloaded,
// deleted. The list is read again by studio.js when the page is seen again.
import { $, api, say, sayError, fmtMs, fmtDuration, el } from "./common.js";
import { wavHeader } from "./recorder.js";

// The first `samples` of a list of Int16Array chunks.
export function head(chunks, samples) {
  const out = [];
  for (const c of chunks) {
    if (samples <= 0) break;
    out.push(c.length <= samples ? c : c.subarray(0, samples));
    samples -= c.length;
  }
  return out;
}

export async function keepTake(settings, { done, chunks, sampleRate }) {
  const takesStatus = $("takes-status");
  say(takesStatus, "Saving the take…", "busy");
  try {
    // The audio streams to the server's disk as raw PCM16; the take's fields ride in the query.
    const fields = { ...settings, sample_rate: sampleRate, ttfa_ms: done.ttfa_ms, stalls: done.stalls };
    const query = new URLSearchParams(Object.entries(fields).filter(([, v]) => v !== null && v !== undefined));
    await api("POST", `/v1/takes?${query}`, new Blob(chunks, { type: "audio/pcm" }));
    say(takesStatus, "");
    await loadTakes();
    window.voxgate.lastKept = { audio_ms: (1000 * chunks.reduce((n, c) => n + c.length, 0)) / sampleRate };
  } catch (err) {
    // Nothing heard is lost: the audio stays here, to download, when the server would not keep it.
    sayError(takesStatus, err, "Could not save the take");
    const samples = chunks.reduce((n, c) => n + c.length, 0);
    const wav = new Blob([wavHeader(samples, sampleRate), ...chunks], { type: "audio/wav" });
    const link = el("a", { href: URL.createObjectURL(wav), download: "take.wav",
                           id: "unsaved-take", text: "Download this take (WAV)" });
    takesStatus.append(" ", link);
  }
}

// A take's name in the page: when it was made, to the second (with the date unless today). Takes
// made in the same second had the same name, so the same labels (a Speak stopped at once and
// pressed again): the second and later of a second are numbered, "12:00:01 (2)", oldest first.
function takeNames(data) {
  const names = new Map();
  const seen = new Map();  // name -> how many takes have it so far
  for (const take of [...data].sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1))) {
    const when = new Date(take.created_at * 1000);
    const base = when.toDateString() === new Date().toDateString() ? when.toLocaleTimeString() : when.toLocaleString();
    const n = (seen.get(base) || 0) + 1;
    seen.set(base, n);
    names.set(take.id, n > 1 ? `${base} (${n})` : base);
  }
  return names;
}

// The row's labels (and its visible time), from its take's name.
function nameRow(li, name) {
  if (li.dataset.name === name) return;
  li.dataset.name = name;
  const label = `take from ${name}`;
  li.querySelector("audio").setAttribute("aria-label", `Replay ${label}`);
  li.querySelector("button.danger").setAttribute("aria-label", `Delete ${label}`);
  for (const a of li.querySelectorAll(".downloads a")) a.setAttribute("aria-label", `Download as ${a.textContent}: ${label}`);
  li.querySelector(".take-when").textContent = name;
}

// (null: unknown, a take that ended early with no utterance.done to say)
function stallsText(stalls) {
  return stalls == null ? "stalls unknown" : `${stalls} stall${stalls === 1 ? "" : "s"}`;
}

function takeItem(take) {
  const text = take.text.length > 160 ? `${take.text.slice(0, 160)}…` : take.text;
  const audio = el("audio", { controls: true, preload: "none", src: `${take.audio_url}?format=wav` });
  const itemStatus = el("p", { class: "status", role: "status" });
  const del = el("button", { type: "button", class: "danger", text: "Delete" });
  del.addEventListener("click", async () => {
    del.disabled = true;
    try {
      await api("DELETE", `/v1/takes/${take.id}`);
      await loadTakes();
      $("takes-h").focus();
    } catch (err) {
      if (err.code === "take_not_found") {  // deleted meanwhile (another tab): the list was out of date
        await loadTakes();
        $("takes-h").focus();
        return;
      }
      del.disabled = false;
      sayError(itemStatus, err, "Could not delete");
    }
  });
  // The server names the file (its text's first words, voice and id): `download` only makes it one.
  const downloads = ["wav", "mp3", "flac"].map((fmt) =>
    el("a", { href: `${take.audio_url}?format=${fmt}`, download: true, class: "button", text: fmt.toUpperCase() }));
  return el("li", { class: "take", "data-take-id": take.id },
    el("p", { class: "take-text", text }),
    el("p", { class: "muted small",
              text: `${take.model} · ${take.voice} · ${take.speed}× · ${fmtDuration(take.audio_ms)} · TTFA ${fmtMs(take.ttfa_ms)} · ${stallsText(take.stalls)} · ` },
      el("span", { class: "take-when" })),
    el("div", { class: "take-actions" }, audio, el("span", { class: "downloads" }, ...downloads), del),
    itemStatus);
}

// The list is brought up to date in place: a take still listed keeps its row (a replay in it plays on,
// the keyboard stays in it); a take deleted meanwhile leaves, and a new one comes in where it belongs.
function showTakes(data) {
  const list = $("takes");
  const rows = new Map([...list.children].map((li) => [li.dataset.takeId, li]));
  const listed = new Set(data.map((t) => t.id));
  const hadFocus = list.contains(document.activeElement);
  const names = takeNames(data);
  for (const [id, li] of rows) if (!listed.has(id)) li.remove();
  let at = list.firstElementChild;
  for (const take of data) {
    const li = rows.get(take.id) || takeItem(take);
    nameRow(li, names.get(take.id));
    if (li === at) { at = at.nextElementSibling; continue; }
    list.insertBefore(li, at);
  }
  if (hadFocus && !list.contains(document.activeElement)) $("takes-h").focus();
}

// The newest `listed` takes are listed (GET /v1/takes' limit); the page says how many more there are,
// and Show more lists 100 more, up to the API's 1000 (it listed the newest 100 as if they were all:
// the others, still on the server's disk, were out of reach).
const PAGE = 100;
const MOST = 1000;
let listed = PAGE;

function showMore(shown, total) {
  $("takes-more").hidden = total <= shown;
  $("takes-more-text").textContent = `The newest ${shown} of ${total} takes are listed`
    + (shown >= MOST ? ` (the most this page lists; GET /v1/takes lists them too).` : ".");
  $("takes-more-button").hidden = shown >= MOST;
  $("takes-more-button").textContent = `Show ${Math.min(PAGE, total - shown, MOST - shown)} more`;
}

$("takes-more-button").addEventListener("click", async () => {
  listed = Math.min(listed + PAGE, MOST);
  await loadTakes();
  if ($("takes-more").hidden || $("takes-more-button").hidden) $("takes-h").focus();  // (the button went)
});

export async function loadTakes() {
  try {
    const { data, total } = await api("GET", `/v1/takes?limit=${listed}`);
    showTakes(data);
    showMore(data.length, total);
    if (/^Could not load takes/.test($("takes-status").textContent)) say($("takes-status"), "");
    $("takes-empty").hidden = data.length > 0;
    window.voxgate.takes = data.length;
  } catch (err) {
    $("takes-empty").hidden = true;  // (it said "No takes yet" beside the error: found by a new-user trial)
    sayError($("takes-status"), err, "Could not load takes");
  }
}
