// Live: polls GET /v1/stats twice a second and plots TTFA, lateness, queue and batch sizes.
import { $, api, say, sayError, el, fmtMs } from "./common.js";
import { plot } from "./chart.js";

const POLL_MS = 500;
const WINDOW_S = 120;
const utterances = [];  // from `recent`, oldest first
const samples = [];     // [time, waiting, running, {lane: batch}] per poll
const LANE_COLORS = { decode: "#6a3dc2", prefill: "#9a6200", urgent: "#d13b2d", background: "#1e9c8c",
  synth: "#1e9c8c" };
const LANE_NAMES = { decode: "LM decode", prefill: "prefill", urgent: "codec (urgent)",
  background: "codec (batched)", synth: "synthesis" };
const EXTRA_COLORS = ["#9a6200", "#2d5bd1", "#b3261e", "#5b6577"];
const lanesSeen = [];   // every lane a model has reported, in order of first sight
let since = 0;
let offset = 0;         // server time - browser time, so "now" is the server's

function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function render() {
  const now = Date.now() / 1000 + offset;
  const t0 = now - WINDOW_S;
  while (samples.length && samples[0][0] < t0 - 5) samples.shift();
  while (utterances.length && utterances[0].at < t0 - 5) utterances.shift();
  plot($("ttfa-chart"), { now, windowS: WINDOW_S, hline: 200, series: [
    { kind: "dots", color: "#2d5bd1", points: utterances.filter((u) => u.ttfa_ms != null)
      .map((u) => [u.at, u.ttfa_ms, u.source === "speech" ? "#1e9c8c" : "#2d5bd1"]) },
  ] });
  plot($("late-chart"), { now, windowS: WINDOW_S, minTop: 100, series: [
    { kind: "dots", color: "#b3261e", points: utterances.map((u) => [u.at, u.late_ms, u.late_ms > 0 ? "#b3261e" : "#8ea4d8"]) },
  ] });
  plot($("queue-chart"), { now, windowS: WINDOW_S, integer: true, series: [
    { kind: "step", color: "#9a6200", points: samples.map((s) => [s[0], s[1]]) },
    { kind: "step", color: "#2d5bd1", points: samples.map((s) => [s[0], s[2]]) },
  ] });
  plot($("batch-chart"), { now, windowS: WINDOW_S, integer: true, series: lanesSeen.map((lane) => (
    { kind: "step", color: laneColor(lane), points: samples.filter((s) => lane in s[3]).map((s) => [s[0], s[3][lane]]) })) });
}

function laneColor(lane) {
  return LANE_COLORS[lane] || EXTRA_COLORS[lanesSeen.indexOf(lane) % EXTRA_COLORS.length];
}

// Only the lanes the models report (a Piper voice has no LM lane): the engine's `lanes`.
function lanesOf(m) {
  return m.lanes || m.last_batch || {};
}

function update(stats) {
  offset = stats.time - Date.now() / 1000;
  since = stats.time;
  utterances.push(...stats.recent);
  let waiting = 0, running = 0;
  const batches = {};
  const rows = [];
  for (const [id, m] of Object.entries(stats.models)) {
    waiting += m.waiting; running += m.running;
    const lanes = lanesOf(m);
    for (const [lane, n] of Object.entries(lanes)) {
      batches[lane] = (batches[lane] || 0) + n;
      if (!lanesSeen.includes(lane)) lanesSeen.push(lane);
    }
    const batch = Object.keys(lanes).length
      ? Object.entries(lanes).map(([lane, n]) => `${LANE_NAMES[lane] || lane} ${n}`).join(" · ") : "–";
    rows.push(el("tr", { "data-model": id }, el("th", { scope: "row", text: id }), el("td", { text: String(m.waiting) }),
      el("td", { text: String(m.running) }), el("td", { class: "hide-narrow", text: fmtMs(m.est_codec_ms) }),
      el("td", { class: "hide-narrow", text: fmtMs(m.est_step_ms) }), el("td", { class: "batch", text: batch })));
  }
  $("batch-legend").replaceChildren(...lanesSeen.map((lane) =>
    el("span", { style: `--c:${laneColor(lane)}`, text: LANE_NAMES[lane] || lane })));
  samples.push([stats.time, waiting, running, batches]);
  $("models").replaceChildren(...rows);
  $("models-empty").hidden = rows.length > 0;
  $("sessions").textContent = String(stats.sessions);
  $("requests").textContent = String(stats.requests);
  $("waiting").textContent = String(waiting);
  const ttfas = utterances.map((u) => u.ttfa_ms).filter((v) => v != null);
  $("ttfa-p").textContent = ttfas.length ? `${fmtMs(percentile(ttfas, 50))} / ${fmtMs(percentile(ttfas, 95))}` : "–";
  $("batch-note").textContent = stats.device === "cpu"
    ? "CPU engine: requests run one chunk at a time; batches grow on a GPU engine."
    : `Engine on ${stats.device}.`;
  render();
}

async function poll() {
  try {
    update(await api("GET", `/v1/stats?since=${since}`));
    say($("live-status"), `Updated ${new Date().toLocaleTimeString()}`);
  } catch (err) {
    sayError($("live-status"), err, "Could not read /v1/stats");
  }
  setTimeout(poll, POLL_MS);
}

window.addEventListener("resize", render);
poll();
