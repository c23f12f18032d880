// Shared helpers: JSON API calls whose errors carry the server's {code, message, field},
// messages shown in the page next to what failed, and formatting.

export const $ = (id) => document.getElementById(id);

export class ApiError extends Error {
  constructor(status, code, message, field = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

// fetch + JSON (or a Blob or FormData body); throws ApiError (network failures become status 0).
export async function api(method, url, body) {
  const res = await send(method, url, body);
  if (res.status === 204) return null;
  const text = await res.text();
  try { return text ? JSON.parse(text) : null; } catch { return null; /* not JSON */ }
}

// The same request, answered with audio (or any bytes) as a Blob.
export async function apiBlob(method, url, body) {
  return (await send(method, url, body)).blob();
}

// A server that needs a key (auth required, or keys in use) answers 401: the page asks for one once
// (the sign-in dialog of base.html), hands it to the server, which keeps it as an HttpOnly cookie
// (gateway/studio_key.py), and tries the request again. Every later request, <audio src> and
// WebSocket carries the cookie.
const KEY_CODES = new Set(["api_key_required", "invalid_api_key"]);
let signingIn = null;

export function signIn(reason) {
  if (!signingIn) {
    signingIn = askForKey(reason).finally(() => { signingIn = null; });
  }
  return signingIn;
}

function askForKey(reason) {
  const dialog = $("signin");
  const input = $("signin-key");
  const status = $("signin-status");
  say(status, reason || "This server needs an API key.", "error");
  input.value = "";
  dialog.showModal();
  input.focus();
  return new Promise((resolve, reject) => {
    dialog.onclose = () => reject(new ApiError(401, "api_key_required", reason || "An API key is needed"));
    $("signin-form").onsubmit = async (event) => {
      event.preventDefault();
      say(status, "Checking the key…", "busy");
      const res = await fetch("/v1/studio/key", { method: "POST", headers: { "Content-Type": "application/json" },
                                                  body: JSON.stringify({ key: input.value }) }).catch(() => null);
      if (res && res.status === 204) {
        dialog.onclose = null;
        dialog.close();
        showSignOut();
        resolve();
        return;
      }
      let message = "Could not reach the server";
      if (res) {
        try { message = (await res.json()).error.message; } catch { message = `HTTP ${res.status}`; }
      }
      say(status, message, "error");
      input.select();
    };
  });
}

function showSignOut() {
  const button = $("signout");
  if (!button) return;
  button.hidden = !document.cookie.split("; ").includes("voxgate_signed_in=1");
  button.onclick = async () => {
    await fetch("/v1/studio/key", { method: "DELETE" }).catch(() => null);
    location.reload();
  };
}
if (typeof document !== "undefined") document.addEventListener("DOMContentLoaded", showSignOut);

async function send(method, url, body, retried = false) {
  const init = { method, headers: {} };
  if (body instanceof FormData) {  // multipart: the browser writes the boundary into Content-Type
    init.body = body;
  } else if (body instanceof Blob) {  // raw bytes (a take's audio), typed by the Blob
    init.headers["Content-Type"] = body.type;
    init.body = body;
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, "network_error", `Could not reach the server (${e.message})`);
  }
  if (res.ok) return res;
  let data = null;
  try { data = JSON.parse(await res.text()); } catch { /* not JSON */ }
  const err = data && data.error;
  if (res.status === 401 && err && KEY_CODES.has(err.code) && !retried && $("signin")) {
    await signIn(err.code === "invalid_api_key" ? "The key this page was signed in with is no longer valid: "
      + "enter another." : "This server needs an API key: enter one (`voxgate keys create NAME` makes one).");
    return send(method, url, body, true);
  }
  if (err) throw new ApiError(res.status, err.code, err.message, err.field);
  throw new ApiError(res.status, "http_error", `${method} ${url} failed: HTTP ${res.status}`);
}

// Show `msg` in a status element (role=status); kind: "" | "ok" | "error" | "busy".
export function say(el, msg, kind = "") {
  el.textContent = msg;
  el.dataset.kind = kind;
}

export function sayError(el, err, prefix = "") {
  const text = err instanceof ApiError ? err.message : String(err && err.message || err);
  say(el, prefix ? `${prefix}: ${text}` : text, "error");
}

export function fmtBytes(n) {
  if (n == null) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

export function fmtMs(ms) {
  if (ms == null) return "–";
  return ms >= 10000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

export function fmtDuration(ms) {
  if (ms == null) return "–";
  const s = ms / 1000;
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export function fmtEta(s) {
  if (s == null) return "–";
  if (s < 60) return `${Math.ceil(s)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

// Model and voice/preset pickers, filled from /v1/models and /v1/audio/voices.
export async function fillModels(select, preferred) {
  const { data } = await api("GET", "/v1/models");
  select.replaceChildren();
  for (const m of data) select.add(new Option(m.name === m.id ? m.id : `${m.name}`, m.id, false, m.id === preferred));
  if (!data.some((m) => m.id === preferred)) {
    const def = data.find((m) => m.default);
    if (def) select.value = def.id;
  }
  return data;
}

export async function fillVoices(select, model, { presets = true } = {}) {
  const { data } = await api("GET", `/v1/audio/voices?model=${encodeURIComponent(model)}`);
  select.replaceChildren();
  const builtin = el("optgroup", { label: "Voices" });
  const saved = el("optgroup", { label: "Presets" });
  for (const v of data) {
    if (v.kind === "preset") {
      if (presets) saved.append(new Option(`${v.name} (${v.voice}, ${v.speed}×)`, v.id));
    } else {
      builtin.append(new Option(v.name, v.id, v.default, v.default));
    }
  }
  select.append(builtin);
  if (saved.children.length) select.append(saved);
  return data;
}
