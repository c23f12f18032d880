// AudioWorklet: plays one utterance's PCM (float32 at the context's rate) through a small
// jitter buffer and reports its playback position, which the page forwards to the server
// as `playback.position` (the server's playback clock; docs/realtime.md).
//
// Messages in:  {type: "start"} a new utterance (position back to 0);
//               {type: "audio", samples: Float32Array};
//               {type: "end"} no more audio will come: play out what is buffered;
//               {type: "clear"} stop now and drop the buffer.
// Messages out: {played, buffered, state, underruns}, with played and buffered in samples,
//               every `reportMs` of audio time while active and at every state change; the one
//               that answers "clear" has `cleared: true` (its `played` is where the stop came).
// States: idle -> buffering (waits for `prebufferMs`, or the end) -> playing; a dry buffer
// before the end is an underrun: back to buffering.
class PcmPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = options.processorOptions || {};
    this.prebuffer = Math.round(sampleRate * (opts.prebufferMs ?? 80) / 1000);
    this.reportEvery = Math.round(sampleRate * (opts.reportMs ?? 200) / 1000);
    this.reset("idle");
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  reset(state) {
    this.queue = [];
    this.offset = 0;
    this.buffered = 0;
    this.played = 0;
    this.underruns = 0;
    this.ended = false;
    this.sinceReport = 0;
    this.state = state;
  }

  onMessage(msg) {
    if (msg.type === "start") {
      this.reset("buffering");
    } else if (msg.type === "audio") {
      if (this.state === "idle") return;  // stopped: late frames are dropped
      this.queue.push(msg.samples);
      this.buffered += msg.samples.length;
    } else if (msg.type === "end") {
      this.ended = true;
    } else if (msg.type === "clear") {
      const played = this.played;
      this.reset("idle");
      this.played = played;
      this.report({ cleared: true });
      return;
    }
    this.report();
  }

  report(extra = {}) {
    this.sinceReport = 0;
    this.port.postMessage({ played: this.played, buffered: this.buffered, state: this.state,
                            underruns: this.underruns, ...extra });
  }

  setState(state) {
    if (state !== this.state) {
      this.state = state;
      this.report();
    }
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    let i = 0;
    if (this.state === "buffering" && (this.buffered >= this.prebuffer || this.ended)) {
      this.setState(this.buffered > 0 ? "playing" : "idle");
    }
    if (this.state === "playing") {
      while (i < out.length && this.queue.length) {
        const head = this.queue[0];
        const n = Math.min(out.length - i, head.length - this.offset);
        out.set(head.subarray(this.offset, this.offset + n), i);
        i += n;
        this.offset += n;
        this.played += n;
        this.buffered -= n;
        if (this.offset >= head.length) { this.queue.shift(); this.offset = 0; }
      }
      if (!this.queue.length) {
        if (this.ended) {
          this.setState("idle");
        } else {
          this.underruns += 1;
          this.setState("buffering");
        }
      }
    }
    out.fill(0, i);
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    if (this.state !== "idle") {
      this.sinceReport += out.length;
      if (this.sinceReport >= this.reportEvery) this.report();
    }
    return true;
  }
}

registerProcessor("pcm-player", PcmPlayer);
