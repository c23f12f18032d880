// A small time-series chart on a canvas: dots, lines or steps over the last `windowS` s.
export function plot(canvas, { series, windowS = 120, now = Date.now() / 1000, yMin = 0, yMax = null, hline = null,
                               integer = false, minTop = 1 }) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(canvas.clientWidth * dpr));
  const h = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, w, h);
  const pad = { l: 44 * dpr, r: 8 * dpr, t: 8 * dpr, b: 20 * dpr };
  const t0 = now - windowS;
  let top = yMax;
  if (top == null) {
    top = Math.max(minTop, hline != null ? hline * 1.25 : 0);
    for (const s of series) for (const [t, v] of s.points) if (t >= t0 && v > top) top = v;
    top = niceCeil(top, integer);
  }
  const x = (t) => pad.l + ((t - t0) / windowS) * (w - pad.l - pad.r);
  const y = (v) => h - pad.b - ((v - yMin) / (top - yMin)) * (h - pad.t - pad.b);
  g.font = `${11 * dpr}px system-ui, sans-serif`;
  g.fillStyle = "#5b6577";
  g.strokeStyle = "#e3e7ee";
  g.lineWidth = dpr;
  for (let i = 0; i <= 4; i++) {
    const v = yMin + ((top - yMin) * i) / 4;
    const yy = Math.round(y(v)) + 0.5;
    g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(w - pad.r, yy); g.stroke();
    g.fillText(integer ? String(Math.round(v)) : fmt(v), 4 * dpr, yy + 4 * dpr);
  }
  for (let s = 0; s <= windowS; s += windowS / 4) {
    g.fillText(s === windowS ? "now" : `-${windowS - s}s`, x(t0 + s) - (s === windowS ? 22 : 8) * dpr, h - 5 * dpr);
  }
  if (hline != null && hline <= top) {
    g.strokeStyle = "#d13b2d"; g.setLineDash([6 * dpr, 4 * dpr]);
    g.beginPath(); g.moveTo(pad.l, y(hline)); g.lineTo(w - pad.r, y(hline)); g.stroke();
    g.setLineDash([]);
  }
  for (const s of series) {
    const pts = s.points.filter(([t]) => t >= t0 - 1);
    g.fillStyle = s.color; g.strokeStyle = s.color; g.lineWidth = 2 * dpr;
    if (s.kind === "dots") {
      for (const [t, v, color] of pts) {
        g.fillStyle = color || s.color;
        g.beginPath(); g.arc(x(t), y(Math.min(v, top)), 3.5 * dpr, 0, 2 * Math.PI); g.fill();
      }
    } else {
      g.beginPath();
      pts.forEach(([t, v], i) => {
        const px = x(t), py = y(Math.min(v, top));
        if (i === 0) g.moveTo(px, py);
        else if (s.kind === "step") { g.lineTo(px, y(Math.min(pts[i - 1][1], top))); g.lineTo(px, py); }
        else g.lineTo(px, py);
      });
      g.stroke();
    }
  }
}

function niceCeil(v, integer) {
  if (integer) return Math.max(4, Math.ceil(v / 4) * 4);
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmt(v) { return v >= 1000 ? `${(v / 1000).toFixed(1)}k` : String(Math.round(v)); }
