// Minimal page: speak text over /v1/realtime and play it through an AudioWorklet.
const $ = (id) => document.getElementById(id);
const status = (msg, error = false) => { $("status").textContent = msg; $("status").className = error ? "error" : ""; };

let ctx = null, node = null, ws = null, playedSamples = 0, utteranceStart = 0;

async function loadModels() {
  const res = await fetch("/v1/models");
  const { data } = await res.json();
  const select = $("model");
  select.innerHTML = "";
  for (const m of data) select.add(new Option(`${m.name}`, m.id, false, m.default));
  await loadVoices();
}

async function loadVoices() {
  const res = await fetch(`/v1/audio/voices?model=${encodeURIComponent($("model").value)}`);
  const { data } = await res.json();
  $("voice").innerHTML = "";
  for (const v of data) $("voice").add(new Option(v.kind === "preset" ? `${v.name} (preset)` : v.name, v.id));
}

async function ensureAudio() {
  if (ctx) return;
  ctx = new AudioContext({ sampleRate: 24000 });
  await ctx.audioWorklet.addModule("/static/pcm-player.js");
  node = new AudioWorkletNode(ctx, "pcm-player");
  node.connect(ctx.destination);
  node.port.onmessage = (e) => {
    playedSamples = e.data.played;
    window.voxgatePlayedMs = 1000 * (playedSamples - utteranceStart) / ctx.sampleRate;
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ type: "playback.position", played_ms: Math.max(0, window.voxgatePlayedMs), playing: e.data.playing }));
    }
  };
}

async function speak() {
  const text = $("text").value;
  await ensureAudio();
  await ctx.resume();
  node.port.postMessage("clear");
  utteranceStart = playedSamples;
  if (ws) ws.close();
  ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`);
  ws.binaryType = "arraybuffer";
  $("speak").disabled = true; $("stop").disabled = false;
  status("Connecting…");
  ws.onmessage = (e) => {
    if (typeof e.data !== "string") {
      const pcm = new Int16Array(e.data);
      const f = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
      node.port.postMessage(f, [f.buffer]);
      return;
    }
    const msg = JSON.parse(e.data);
    if (msg.type === "session.created") {
      ws.send(JSON.stringify({ type: "session.update", session: { model: $("model").value, voice: $("voice").value, sample_rate: 24000 } }));
    } else if (msg.type === "session.updated") {
      ws.send(JSON.stringify({ type: "text.append", text }));
      ws.send(JSON.stringify({ type: "text.flush" }));
      status("Synthesising…");
    } else if (msg.type === "audio.start") {
      status("Playing…");
    } else if (msg.type === "utterance.done") {
      window.voxgateLastDone = msg;
      status(`Done: ${(msg.audio_ms / 1000).toFixed(1)} s of audio, TTFA ${msg.ttfa_ms} ms, ${msg.stalls} stalls${msg.cancelled ? " (stopped)" : ""}`);
      $("speak").disabled = false; $("stop").disabled = true;
    } else if (msg.type === "error") {
      status(`Error: ${msg.error.message}`, true);
      $("speak").disabled = false; $("stop").disabled = true;
    }
  };
  ws.onerror = () => status("Connection failed", true);
}

function stop() {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "response.cancel" }));
  if (node) node.port.postMessage("clear");
}

$("text").addEventListener("input", () => { $("count").textContent = $("text").value.length; });
$("count").textContent = $("text").value.length;
$("model").addEventListener("change", loadVoices);
$("speak").addEventListener("click", () => speak().catch((e) => status(String(e), true)));
$("stop").addEventListener("click", stop);
loadModels().catch((e) => status(`Could not load models: ${e}`, true));
