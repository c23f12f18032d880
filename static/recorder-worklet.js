// AudioWorklet processor: the microphone's samples (channels averaged to mono), posted to
// the page in blocks of `blockSize` frames. It outputs silence.
class RecorderProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.blockSize = options.processorOptions.blockSize;
    this.block = new Float32Array(this.blockSize);
    this.filled = 0;
    this.running = true;
    this.port.onmessage = (e) => {
      if (e.data === "stop") {
        this.port.postMessage(this.block.slice(0, this.filled));  // the rest, then the end
        this.port.postMessage("stopped");
        this.running = false;
      }
    };
  }

  process(inputs) {
    if (!this.running) return false;
    const channels = inputs[0];
    if (channels && channels.length) {
      const n = channels[0].length;
      for (let i = 0; i < n; i++) {
        let sum = 0;
        for (const ch of channels) sum += ch[i];
        this.block[this.filled++] = sum / channels.length;
        if (this.filled === this.blockSize) {
          this.port.postMessage(this.block);
          this.block = new Float32Array(this.blockSize);
          this.filled = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("voxgate-recorder", RecorderProcessor);
