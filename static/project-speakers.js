// Speaker pickers for projects: the model's voices, then every usable preset (a preset
// brings its own model). `defaultLabel` adds a first option "" meaning the project's speaker.
import { api, el } from "./common.js";

export async function fillSpeakers(select, model, { defaultLabel = null, selected = null } = {}) {
  const [{ data: voices }, { data: presets }] = await Promise.all([
    api("GET", `/v1/audio/voices?model=${encodeURIComponent(model)}`), api("GET", "/v1/presets")]);
  select.replaceChildren();
  if (defaultLabel) select.append(new Option(defaultLabel, ""));
  const builtin = el("optgroup", { label: "Voices" });
  for (const v of voices) if (v.kind !== "preset") builtin.append(new Option(v.name, v.id));
  const saved = el("optgroup", { label: "Presets" });
  for (const p of presets) if (p.usable) saved.append(new Option(`${p.name} (${p.model}, ${p.voice})`, p.name));
  select.append(builtin);
  if (saved.children.length) select.append(saved);
  if (selected != null && [...select.options].some((o) => o.value === selected)) select.value = selected;
}
