// AudioWorklet: plays PCM (float32 at the context's rate) from a queue and reports
// how many samples it has played, which the page forwards as playback.position.
class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = [];
    this.offset = 0;
    this.played = 0;
    this.sinceReport = 0;
    this.port.onmessage = (e) => {
      if (e.data === "clear") { this.queue = []; this.offset = 0; return; }
      this.queue.push(e.data);
    };
  }
  process(inputs, outputs) {
    const out = outputs[0][0];
    let i = 0;
    while (i < out.length && this.queue.length) {
      const head = this.queue[0];
      const n = Math.min(out.length - i, head.length - this.offset);
      out.set(head.subarray(this.offset, this.offset + n), i);
      i += n; this.offset += n; this.played += n;
      if (this.offset >= head.length) { this.queue.shift(); this.offset = 0; }
    }
    out.fill(0, i);
    this.sinceReport += out.length;
    if (this.sinceReport >= sampleRate / 10) {  // ~10 reports a second
      this.sinceReport = 0;
      this.port.postMessage({ played: this.played, playing: this.queue.length > 0 });
    }
    return true;
  }
}
registerProcessor("pcm-player", PcmPlayer);
