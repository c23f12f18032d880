// Waveform on a canvas, drawn as audio arrives: min/max per block of samples, scaled so
// the take fits the width (at least `minSeconds` wide), with the playhead over it, and
// optionally a selected range and shaded ranges (samples), e.g. a pause at a join.
const BLOCK = 120;  // samples per peak: 5 ms at 24 kHz

export class Waveform {
  constructor(canvas, { sampleRate = 24000, minSeconds = 6 } = {}) {
    this.canvas = canvas;
    this.sampleRate = sampleRate;
    this.minSeconds = minSeconds;
    this.reset();
  }

  reset() {
    this.mins = [];
    this.maxs = [];
    this.pending = [];  // samples of a block not yet complete
    this.numSamples = 0;
    this.playhead = 0;
    this.selection = null;  // [start, end) in samples
    this.shades = [];       // [[start, end), ...] in samples
    this.draw();
  }

  // x in CSS pixels -> sample index under it.
  sampleAt(x) {
    const span = Math.max(this.minSeconds * this.sampleRate, this.numSamples);
    return Math.max(0, Math.min(this.numSamples, Math.round((x / Math.max(1, this.canvas.clientWidth)) * span)));
  }

  setSelection(range) {
    this.selection = range;
    this.schedule();
  }

  add(pcm) {  // Int16Array
    for (let i = 0; i < pcm.length; i++) {
      this.pending.push(pcm[i] / 32768);
      if (this.pending.length === BLOCK) this.flushBlock();
    }
    this.numSamples += pcm.length;
    this.schedule();
  }

  flushBlock() {
    let lo = 0, hi = 0;
    for (const v of this.pending) { if (v < lo) lo = v; if (v > hi) hi = v; }
    this.mins.push(lo);
    this.maxs.push(hi);
    this.pending = [];
  }

  setPlayhead(sample) {
    this.playhead = sample;
    this.schedule();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(c.clientWidth * dpr));
    const h = Math.max(1, Math.round(c.clientHeight * dpr));
    if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
    const g = c.getContext("2d");
    const style = getComputedStyle(c);
    g.clearRect(0, 0, w, h);
    g.fillStyle = style.getPropertyValue("--wave-bg") || "#eef1f6";
    g.fillRect(0, 0, w, h);
    const mid = h / 2;
    const spanAll = Math.max(this.minSeconds * this.sampleRate, this.numSamples) || 1;
    const band = ([a, b], color) => {
      g.fillStyle = color;
      g.fillRect(Math.round((a / spanAll) * w), 0, Math.max(1, Math.round(((b - a) / spanAll) * w)), h);
    };
    for (const range of this.shades) band(range, style.getPropertyValue("--wave-shade") || "#fdf0d5");
    if (this.selection) band(this.selection, style.getPropertyValue("--wave-select") || "#d6e2ff");
    g.fillStyle = style.getPropertyValue("--wave-axis") || "#c5ccd8";
    g.fillRect(0, Math.floor(mid), w, Math.max(1, Math.round(dpr)));
    const span = Math.max(this.minSeconds * this.sampleRate, this.numSamples);
    const blocksPerPx = span / BLOCK / w;
    const played = style.getPropertyValue("--wave-played") || "#2d5bd1";
    const ahead = style.getPropertyValue("--wave-fg") || "#8ea4d8";
    const n = this.mins.length;
    for (let x = 0; x < w; x++) {
      const b0 = Math.floor(x * blocksPerPx);
      if (b0 >= n) break;
      const b1 = Math.min(n, Math.max(b0 + 1, Math.floor((x + 1) * blocksPerPx)));
      let lo = 0, hi = 0;
      for (let b = b0; b < b1; b++) { if (this.mins[b] < lo) lo = this.mins[b]; if (this.maxs[b] > hi) hi = this.maxs[b]; }
      g.fillStyle = b0 * BLOCK < this.playhead ? played : ahead;
      const top = mid - hi * mid * 0.95;
      g.fillRect(x, top, 1, Math.max(1, (hi - lo) * mid * 0.95));
    }
    if (this.playhead > 0) {
      const x = Math.round((this.playhead / span) * w);
      g.fillStyle = style.getPropertyValue("--wave-head") || "#d13b2d";
      g.fillRect(x, 0, Math.max(1, Math.round(2 * dpr)), h);
    }
  }
}
