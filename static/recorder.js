// Microphone recording as a WAV file (PCM16 mono at 24 kHz, the rate references are kept at),
// through an AudioWorklet: MediaRecorder gives WebM/Opus in Chromium, which the server's
// reader (libsndfile: WAV, FLAC, Ogg) does not take.
export const RECORD_RATE = 24000;
const BLOCK_MS = 100;

export class Recorder {
  // onTick(seconds) as samples arrive; onStop(wavBlob, seconds) once, when stopped by
  // stop() or at `maxSeconds`.
  constructor({ maxSeconds, onTick = () => {}, onStop = () => {} }) {
    this.maxSamples = Math.floor(maxSeconds * RECORD_RATE);
    this.onTick = onTick;
    this.onStop = onStop;
    this.blocks = [];
    this.samples = 0;
    this.ctx = null;
    this.stream = null;
    this.node = null;
    this.done = new Promise((resolve) => { this.resolveDone = resolve; });  // after onStop
  }

  // Asks for the microphone; rejects (NotAllowedError, NotFoundError, ...) if there is none.
  async start() {
    if (!window.isSecureContext || !navigator.mediaDevices) {
      throw new DOMException("the microphone needs a secure page (https, or the server on localhost)", "SecurityError");
    }
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 } });
    this.ctx = new AudioContext({ sampleRate: RECORD_RATE });
    await this.ctx.audioWorklet.addModule(new URL("./recorder-worklet.js", import.meta.url));
    const source = this.ctx.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.ctx, "voxgate-recorder", {
      numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1],
      processorOptions: { blockSize: Math.round(RECORD_RATE * BLOCK_MS / 1000) },
    });
    this.node.port.onmessage = (e) => this.onBlock(e.data);
    source.connect(this.node);
    this.node.connect(this.ctx.destination);  // pulled by the graph; it writes silence
    if (this.ctx.state !== "running") await this.ctx.resume();
  }

  onBlock(data) {
    if (data === "stopped") { this.finish(); return; }
    if (this.samples >= this.maxSamples) return;
    const block = data.subarray(0, this.maxSamples - this.samples);
    this.blocks.push(block);
    this.samples += block.length;
    this.onTick(this.samples / RECORD_RATE);
    if (this.samples >= this.maxSamples) this.stop();  // the server's longest reference
  }

  stop() {
    if (this.node && !this.stopping) {
      this.stopping = true;
      this.node.port.postMessage("stop");
    }
  }

  finish() {
    this.node.disconnect();
    for (const track of this.stream.getTracks()) track.stop();  // the microphone is released
    this.ctx.close();
    this.onStop(wavBlob(this.blocks, this.samples, RECORD_RATE), this.samples / RECORD_RATE);
    this.resolveDone();
  }
}

// A RIFF/WAVE header (44 bytes: PCM, format 1, mono, 16-bit) for `numSamples` samples at `rate` Hz.
export function wavHeader(numSamples, rate) {
  const view = new DataView(new ArrayBuffer(44));
  const text = (at, s) => { for (let i = 0; i < s.length; i++) view.setUint8(at + i, s.charCodeAt(i)); };
  text(0, "RIFF"); view.setUint32(4, 36 + 2 * numSamples, true); text(8, "WAVE");
  text(12, "fmt "); view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, rate, true); view.setUint32(28, 2 * rate, true); view.setUint16(32, 2, true);
  view.setUint16(34, 16, true); text(36, "data"); view.setUint32(40, 2 * numSamples, true);
  return view;
}

// A RIFF/WAVE file of float blocks in [-1, 1]: the header, then little-endian 16-bit samples.
export function wavBlob(blocks, numSamples, rate) {
  const samples = new DataView(new ArrayBuffer(2 * numSamples));
  let at = 0;
  for (const block of blocks) {
    for (const x of block) {
      const s = Math.max(-1, Math.min(1, x));
      samples.setInt16(at, Math.round(s < 0 ? s * 32768 : s * 32767), true);
      at += 2;
    }
  }
  return new Blob([wavHeader(numSamples, rate), samples], { type: "audio/wav" });
}
