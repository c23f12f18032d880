// Speaker pickers for projects: the model's voices, then every usable preset (a preset
// brings its own model). `defaultLabel` adds a first option "" meaning the project's speaker.
import { api, el } from "./common.js";

// The lists, fetched once for all the pickers a render makes (a long project has hundreds), and
// again after CACHE_MS (a preset made meanwhile on another page).
const CACHE_MS = 5000;
const lists = new Map();  // model -> {at, promise}

function speakerLists(model) {
  const hit = lists.get(model);
  if (hit && performance.now() - hit.at < CACHE_MS) return hit.promise;
  const promise = Promise.all([api("GET", `/v1/audio/voices?model=${encodeURIComponent(model)}`),
                               api("GET", "/v1/presets")]);
  promise.catch(() => lists.delete(model));  // (a failure is not kept)
  lists.set(model, { at: performance.now(), promise });
  return promise;
}

export async function fillSpeakers(select, model, { defaultLabel = null, selected = null } = {}) {
  const [{ data: voices }, { data: presets }] = await speakerLists(model);
  select.replaceChildren();
  if (defaultLabel) select.append(new Option(defaultLabel, ""));
  const builtin = el("optgroup", { label: "Voices" });
  for (const v of voices) if (v.kind !== "preset") builtin.append(new Option(v.name, v.id));
  const saved = el("optgroup", { label: "Presets" });
  for (const p of presets) if (p.usable) saved.append(new Option(`${p.name} (${p.model}, ${p.voice})`, p.name));
  select.append(builtin);
  if (saved.children.length) select.append(saved);
  // A speaker no longer offered (its preset deleted or unusable, a voice of the model the project had
  // before) is shown as it is, not as the first option: the page said "Project default" while the
  // passage failed to generate, and a Save settings changed the project's to the first voice.
  if (selected && ![...select.options].some((o) => o.value === selected)) {
    const gone = el("optgroup", { label: "Not available" });
    gone.append(new Option(`${selected} (not available: choose another)`, selected));
    select.append(gone);
  }
  if (selected != null) select.value = selected;
}
