// A project's export: the chosen takes and pauses rendered by the server (GET .../export), saved
// under the name its Content-Disposition gives, and what was exported said.
import { $, errorOf, fetchSigned, say, el, fmtDuration, clearInvalid, markInvalid } from "./common.js";

// The file name of a Content-Disposition: RFC 6266's `filename*` (UTF-8, the project's own name)
// before the ASCII `filename`.
function downloadName(header, fallback) {
  const utf8 = (header || "").match(/filename\*=UTF-8''([^;]+)/i);
  if (utf8) {
    try { return decodeURIComponent(utf8[1]); } catch { /* a bad escape: the ASCII name */ }
  }
  const ascii = (header || "").match(/filename="([^"]+)"/);
  return ascii ? ascii[1] : fallback;
}

export async function exportAudio(projectId, project) {
  const fmt = $("e-format").value;
  clearInvalid($("export-h").parentElement);
  const params = new URLSearchParams({ format: fmt });
  if ($("e-normalize").checked) {
    // An empty or unreadable field (value "") was sent as loudness= and the export came back
    // unnormalised without a word (found by a new-user trial).
    const lufs = $("e-lufs").value.trim();
    if (lufs === "") {
      say($("e-status"), "Target (LUFS) must be a number from -70 to 0.", "error");
      markInvalid($("e-lufs"), $("e-status"));
      return;
    }
    params.set("loudness", lufs);
  }
  say($("e-status"), "Rendering…", "busy");
  const res = await fetchSigned(`/v1/projects/${projectId}/export?${params}`);
  if (!res.ok) throw await errorOf(res, "Export");
  const url = URL.createObjectURL(await res.blob());
  const a = el("a", { href: url, download: downloadName(res.headers.get("Content-Disposition"), `project.${fmt}`) });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  const gain = res.headers.get("X-Voxgate-Gain-Db");
  const stale = project && project.num_out_of_date;  // their chosen takes speak the old text (docs/projects.md)
  say($("e-status"), `Exported ${fmtDuration(Number(res.headers.get("X-Voxgate-Duration-Ms")))} as ${fmt.toUpperCase()}` +
      (gain ? `, gain ${Number(gain).toFixed(1)} dB${res.headers.get("X-Voxgate-Loudness-Limited") === "true" ? " (limited by the peak)" : ""}` : "") +
      (stale ? `. Note: ${stale} passage${stale === 1 ? " is" : "s are"} out of date, so the export has what was chosen before (Generate first for the new text)` : "") + ".", "ok");
}
