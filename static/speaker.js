// One realtime session over /v1/realtime, played through the pcm-player AudioWorklet.
// speak() resolves with the utterance's `utterance.done` and the PCM16 it received;
// stop() cancels at once (response.cancel + the worklet's buffer dropped). The worklet's
// position goes back to the server as `playback.position` a few times a second.
import { ApiError, errorOf, fetchSigned } from "./common.js";

export const SAMPLE_RATE = 24000;
const PREBUFFER_MS = 80;  // jitter buffer before playback starts (and after an underrun)
const REPORT_MS = 200;    // playback.position five times a second
const CLEARED_MS = 300;   // the worklet's answer to "clear", waited for at most this long
const RESUME_MS = 3000;   // a context not running by then was not let play (autoplay policy, no device)

// The sound could not start or went away. Said once, in words a listener can act on: the browser's
// own messages ("Failed to execute 'resume' on 'BaseAudioContext'…", or a null node's TypeError at
// the next Speak) and a wait that never ended ("Synthesising…", "Playing…" for ever) said nothing.
const CHECK = "check that speakers or headphones are connected and not held by another program, then try again";
export const AUDIO_BLOCKED = "The browser has not let this page play sound (its autoplay setting, or no sound "
  + "device): allow sound for this site (in the address bar's site settings), then try again.";

function audioError(code, message, cause = null) {
  const why = cause ? ` (${cause.name || "Error"}: ${String(cause.message || cause).replace(/\.$/, "")})` : "";
  return new ApiError(0, code, `${message}${why}.`);
}

// Why the session's connection closed, from its close event: "The realtime connection closed" said
// neither that the server had stopped (a restart, Ctrl-C) nor what to do (found by a studio-user trial).
export function closedMessage({ code, reason }) {
  if (code === 1012 || code === 1013 || code === 1001) {
    return `The server closed the connection (${reason || "it is stopping or restarting"}): press Speak again once it is back`;
  }
  if (code === 1006) {
    return "The connection to the server was lost (the server stopped, or the network dropped): "
      + "press Speak again once it is back";
  }
  return `The realtime connection closed (code ${code}${reason ? `: ${reason}` : ""})`;
}

export class Speaker {
  // onAudioError(err): the sound stopped (a device lost, the browser suspended it) while a take played
  // or was synthesised; called once a failure. A take being synthesised is also rejected with `err`.
  constructor({ onAudio = () => {}, onPosition = () => {}, onStart = () => {}, onAudioError = () => {} } = {}) {
    this.onAudio = onAudio;
    this.onPosition = onPosition;
    this.onStart = onStart;
    this.onAudioError = onAudioError;
    this.ctx = null;
    this.node = null;
    this.ws = null;
    this.waiters = [];      // {types, resolve, reject}: the next matching server event
    this.current = null;    // the utterance being spoken
    this.playedMs = 0;
    this.clearing = null;   // the worklet's position when stop() cleared it (a Promise of ms), else null
    this.onCleared = null;
    this.playerState = "idle";
    this.numReports = 0;
  }

  // The context and its player, made at the first Speak and resumed at each; an ApiError
  // (code audio_unavailable or audio_blocked) that says what to do when the browser cannot play.
  async ensureAudio() {
    if (!this.ctx) {
      try {
        await this.openAudio();
      } catch (err) {
        this.closeAudio();  // (half made: the next Speak starts again, not at a player that is not there)
        throw audioError("audio_unavailable", `The browser could not start playing sound: ${CHECK}`, err);
      }
    }
    if (this.ctx.state === "running") return;
    let timer;
    const late = new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new ApiError(0, "audio_blocked", AUDIO_BLOCKED)), RESUME_MS);
    });
    try {
      await Promise.race([this.ctx.resume(), late]);  // (Chrome leaves a refused resume() pending)
    } catch (err) {
      if (err instanceof ApiError) throw err;
      this.closeAudio();
      throw audioError("audio_unavailable", `The browser could not start playing sound: ${CHECK}`, err);
    } finally {
      clearTimeout(timer);
    }
  }

  async openAudio() {
    const ctx = new AudioContext({ sampleRate: SAMPLE_RATE, latencyHint: "interactive" });
    this.ctx = ctx;
    this.audioFailure = null;
    await ctx.audioWorklet.addModule(new URL("./pcm-player.js", import.meta.url));
    this.node = new AudioWorkletNode(ctx, "pcm-player", {
      numberOfInputs: 0, outputChannelCount: [1],
      processorOptions: { prebufferMs: PREBUFFER_MS, reportMs: REPORT_MS },
    });
    const node = this.node;
    node.connect(ctx.destination);
    node.port.onmessage = (e) => { if (node === this.node) this.onWorklet(e.data); };  // (not a closed one's)
    node.onprocessorerror = () => this.audioFailed(ctx, "the player stopped");
    // (Chrome: an error event when the output device fails; every browser: a state change when the
    // system takes the device (suspended, or Safari's interrupted) or the context closes.)
    ctx.addEventListener("error", (e) => this.audioFailed(ctx, "the sound device failed", e.error));
    ctx.addEventListener("statechange", () => {
      if (ctx.state !== "running") this.audioFailed(ctx, `the sound device was taken away (${ctx.state})`);
    });
  }

  closeAudio() {
    const ctx = this.ctx;
    this.ctx = null;
    this.node = null;
    if (ctx && ctx.state !== "closed") ctx.close().catch(() => {});
  }

  // The sound stopped under a take: one failure, said once (the error event and the state changes
  // that come with it are the same one); the take being spoken is cancelled; the next Speak opens
  // the device again. Not while idle: the next Speak resumes a context suspended meanwhile.
  audioFailed(ctx, what, cause = null) {
    if (ctx !== this.ctx || this.audioFailure) return;
    if (!this.current && this.playerState === "idle") return;
    const err = audioError("audio_failed", `Playback stopped: ${what}; ${CHECK}`, cause);
    this.audioFailure = err;
    this.playerState = "idle";
    if (this.current && this.ws && this.ws.readyState === WebSocket.OPEN) this.send({ type: "response.cancel" });
    this.closeAudio();
    this.fail(err);
    this.onAudioError(err);
  }

  onWorklet(msg) {
    const wasActive = this.playerState !== "idle";
    this.playerState = msg.state;
    this.playedMs = (1000 * msg.played) / this.ctx.sampleRate;
    const active = msg.state !== "idle";
    // playing: true while buffering too: an empty buffer is a deadline, not a pause.
    // Reports go on until the audio has played out (the server ignores them after done).
    if ((active || wasActive) && this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.send({ type: "playback.position", played_ms: this.playedMs, playing: active });
      this.numReports += 1;
    }
    if (msg.cleared && this.onCleared) this.onCleared();
    this.onPosition(this.playedMs, msg);
  }

  // Where playback was when stop() came, in ms: the worklet's own position as it was cleared. playedMs
  // is its latest report, up to REPORT_MS behind: a take stopped part way was kept that much shorter
  // than what had been heard (found by a helper's review). Not stopped: playedMs.
  stoppedAtMs() {
    return this.clearing || Promise.resolve(this.playedMs);
  }

  clearPlayer() {
    this.clearing = new Promise((resolve) => {
      const timer = setTimeout(() => { this.onCleared = null; resolve(this.playedMs); }, CLEARED_MS);
      this.onCleared = () => { clearTimeout(timer); this.onCleared = null; resolve(this.playedMs); };
    });
    this.node.port.postMessage({ type: "clear" });
  }

  // Open the session; a handshake refused for want of a key cannot be told from other closes in a
  // browser, so a keyed GET asks (signing in if that is why) and the connection is tried once more.
  async connect(retried = false) {
    try {
      return await this.open();
    } catch (err) {
      if (retried || err.code !== "connection_closed") throw err;
      const res = await fetchSigned("/v1/stats?since=0");
      if (!res.ok) throw await errorOf(res, "GET /v1/stats");
      return this.connect(true);
    }
  }

  open() {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) return Promise.resolve();
    if (this.ws) this.ws.close();  // (still opening for a Speak that was stopped meanwhile)
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/v1/realtime`);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onmessage = (e) => this.onMessage(e.data);
    ws.onclose = (e) => {
      if (this.ws !== ws) return;  // (one given up while it opened: a Stop then)
      this.ws = null;
      this.fail(new ApiError(0, "connection_closed", closedMessage(e)));
    };
    return this.expect(["session.created"]);
  }

  send(msg) { this.ws.send(JSON.stringify(msg)); }

  expect(types) {
    return new Promise((resolve, reject) => this.waiters.push({ types, resolve, reject }));
  }

  // A take that fails part way (the connection lost, its synthesis failed, the sound gone) is rejected
  // with `err.partial` ({chunks, sampleRate, stopped, clientTtfaMs}: the audio that came, whether stop()
  // came first, and when its first audio came, as this page measured it) when any came: what was buffered plays out, and the caller decides what to keep and when to
  // say it (it waits for the end of the playback, or stops it), as for a take that ends.
  fail(err) {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w.reject(err);
    const cur = this.current;
    if (cur) {
      this.current = null;
      clearTimeout(cur.stopTimer);
      this.node && this.node.port.postMessage({ type: "end" });
      if (cur.chunks.length) {
        err.partial = { chunks: cur.chunks, sampleRate: cur.sampleRate, stopped: cur.stopped,
                        clientTtfaMs: clientTtfa(cur) };
      }
      cur.reject(err);
    }
  }

  onMessage(data) {
    if (typeof data !== "string") {
      const cur = this.current;
      if (!cur || cur.stopped) return;
      const pcm = new Int16Array(data);
      const samples = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
      this.node.port.postMessage({ type: "audio", samples }, [samples.buffer]);
      cur.chunks.push(pcm);
      if (cur.firstAudioAt == null) cur.firstAudioAt = performance.now();
      this.onAudio(pcm);
      return;
    }
    const msg = JSON.parse(data);
    if (msg.type === "error") {
      const err = new ApiError(400, msg.error.code, msg.error.message, msg.error.field);
      if (this.waiters.length) { this.fail(err); return; }
      if (this.current) { this.fail(err); return; }
      return;
    }
    const i = this.waiters.findIndex((w) => w.types.includes(msg.type));
    if (i >= 0) { this.waiters.splice(i, 1)[0].resolve(msg); return; }
    if (msg.type === "audio.start" && this.current) {
      this.current.sampleRate = msg.sample_rate;
      this.onStart(msg);
    } else if (msg.type === "utterance.done" && this.current) {
      this.finish(msg);
    }
  }

  finish(done) {
    const cur = this.current;
    this.current = null;
    clearTimeout(cur.stopTimer);
    this.node.port.postMessage({ type: "end" });
    cur.resolve({ done, chunks: cur.chunks, sampleRate: cur.sampleRate, clientTtfaMs: clientTtfa(cur) });
  }

  // Speak `text`; resolves {done, chunks (Int16Array[]), sampleRate, clientTtfaMs}. Rejects with an
  // ApiError: code "stopped" when stop() came before the text was sent (nothing was spoken).
  async speak({ text, model, voice, speed }) {
    if (this.current) throw new ApiError(0, "busy", "Already speaking: stop first");
    const start = { stopped: false };
    this.starting = start;
    this.clearing = null;
    const step = async (promise) => {
      await promise;
      if (start.stopped) throw new ApiError(0, "stopped", "Stopped before the text was sent");
    };
    try {
      await step(this.ensureAudio());
      await step(this.connect());
      const session = { model, voice, sample_rate: this.ctx.sampleRate, format: "pcm16" };
      if (speed != null) session.speed = speed;
      this.send({ type: "session.update", session });
      await step(this.expect(["session.updated"]));
    } finally {
      if (this.starting === start) this.starting = null;
    }
    this.node.port.postMessage({ type: "start" });
    const result = new Promise((resolve, reject) => {
      this.current = { resolve, reject, chunks: [], sampleRate: this.ctx.sampleRate, sentAt: performance.now(),
                       firstAudioAt: null, stopped: false };
    });
    this.send({ type: "text.append", text });
    this.send({ type: "text.flush" });
    return result;
  }

  // Cancel the utterance now: the worklet drops its buffer, the server stops the engine. A Speak still
  // starting (the sound, the connection, the session: a slow network) sends no text: a Stop then was
  // ignored, and the take played once the session was ready (found by a studio-user trial).
  stop() {
    if (this.starting) {
      this.starting.stopped = true;
      this.starting = null;
      this.fail(new ApiError(0, "stopped", "Stopped before the text was sent"));  // (the wait for the server)
    }
    if (this.node && !this.clearing) this.clearPlayer();  // (a second Stop: the first one's position)
    const cur = this.current;
    if (cur && !cur.stopped) {
      cur.stopped = true;
      if (this.ws && this.ws.readyState === WebSocket.OPEN) this.send({ type: "response.cancel" });
      // The server answers with utterance.done (cancelled); if nothing was speakable yet it
      // has no utterance to end, so don't wait for it for long.
      const receivedMs = (1000 * cur.chunks.reduce((n, c) => n + c.length, 0)) / cur.sampleRate;
      cur.stopTimer = setTimeout(() => {
        if (this.current === cur) {
          this.finish({ type: "utterance.done", utterance_id: null, audio_ms: receivedMs, ttfa_ms: clientTtfa(cur),
                        stalls: null, cancelled: true });  // (stalls: the server never said)
        }
      }, 1500);
    }
  }
}

// From the text sent to the first audio received, in ms, as this page measured it (null: none came).
function clientTtfa(cur) {
  return cur.firstAudioAt == null ? null : cur.firstAudioAt - cur.sentAt;
}

// Int16Array chunks -> base64 of their little-endian bytes (for POST /v1/takes).
export function pcmToBase64(chunks) {
  let total = 0;
  for (const c of chunks) total += c.byteLength;
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) { bytes.set(new Uint8Array(c.buffer, c.byteOffset, c.byteLength), at); at += c.byteLength; }
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}
