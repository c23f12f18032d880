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

// A server that needs a key (auth required, or keys in use) answers 401: the page asks for one (the
// sign-in dialog of base.html), hands it to the server, which keeps it as an HttpOnly cookie
// (gateway/studio_key.py), and tries the request again. Every later request, <audio src> and
// WebSocket carries the cookie. Cancelled, the page stops asking (its polls would reopen the dialog)
// until the header's Sign in button is pressed, which reloads the page once signed in.
const KEY_CODES = new Set(["api_key_required", "invalid_api_key"]);
const NEEDS_KEY = "This server needs an API key. Ask its admin for one (they make keys with voxgate keys create NAME).";
let signingIn = null;
let declined = false;

export function signedInScope() {
  const cookie = document.cookie.split("; ").find((c) => c.startsWith("voxgate_signed_in="));
  return cookie ? cookie.split("=")[1] : null;  // "admin", "speech", ...; null: not signed in here
}

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
  const before = document.activeElement;
  say(status, reason || NEEDS_KEY, "error");
  input.value = "";
  dialog.showModal();
  input.focus();
  // Back where the keyboard was; opened at page load (nothing focused yet), to the header's Sign in.
  const restoreFocus = () => {
    if (before && before !== document.body && before.isConnected) before.focus();
    else if ($("signout") && !$("signout").hidden) $("signout").focus();
  };
  input.removeAttribute("aria-invalid");
  input.oninput = () => input.removeAttribute("aria-invalid");
  return new Promise((resolve, reject) => {
    dialog.onclose = () => {
      declined = true;
      showAccount();
      restoreFocus();
      reject(new ApiError(401, "api_key_required", "Not signed in: press Sign in (top right) to give a key."));
    };
    $("signin-form").onsubmit = async (event) => {
      event.preventDefault();
      say(status, "Checking the key…", "busy");
      const res = await fetch("/v1/studio/key", { method: "POST", headers: { "Content-Type": "application/json" },
                                                  body: JSON.stringify({ key: input.value }) }).catch(() => null);
      if (res && res.ok) {
        input.value = "";  // the key leaves the page: only the HttpOnly cookie keeps it
        dialog.onclose = null;
        dialog.close();
        declined = false;
        showAccount();
        restoreFocus();
        resolve();
        return;
      }
      let message = "Could not reach the server";
      if (res) {
        try { message = (await res.json()).error.message; } catch { message = `HTTP ${res.status}`; }
      }
      say(status, message, "error");
      input.setAttribute("aria-invalid", "true");  // (the field is described by the status: base.html)
      input.select();
    };
  });
}

// The header's account button: Sign out once signed in here; Sign in after the dialog was cancelled.
function showAccount() {
  const button = $("signout");
  if (!button) return;
  const scope = signedInScope();
  button.hidden = !scope && !declined;
  button.textContent = scope ? "Sign out" : "Sign in";
  button.title = scope ? `Signed in with ${scope === "admin" ? "an" : "a"} ${scope} key` : "";
  button.onclick = async () => {
    if (scope) {
      await fetch("/v1/studio/key", { method: "DELETE" }).catch(() => null);
      location.reload();
      return;
    }
    declined = false;
    try { await signIn(); location.reload(); } catch { /* cancelled again */ }
  };
}
if (typeof document !== "undefined") document.addEventListener("DOMContentLoaded", showAccount);

// fetch, with a 401 for want of a key answered by signing in (once) and trying again; other answers
// as they come. Network failures become ApiError status 0.
export async function fetchSigned(url, init = {}, retried = false) {
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, "network_error", `Could not reach the server (${e.message})`);
  }
  if (res.status !== 401 || retried || !$("signin")) return res;
  let err = null;
  try { err = (await res.clone().json()).error; } catch { /* not JSON */ }
  if (!err || !KEY_CODES.has(err.code)) return res;
  if (declined) throw new ApiError(401, err.code, "Not signed in: press Sign in (top right) to give a key.");
  await signIn(err.code === "invalid_api_key" && signedInScope()
    ? "The key this browser was signed in with is no longer valid: enter another." : NEEDS_KEY);
  return fetchSigned(url, init, true);
}

// A non-2xx answer as an ApiError with the server's {code, message, field}; a scope the signed-in
// key lacks said in the page's words.
export async function errorOf(res, what) {
  let data = null;
  try { data = JSON.parse(await res.text()); } catch { /* not JSON */ }
  const err = data && data.error;
  if (err && err.code === "insufficient_scope" && signedInScope()) {
    return new ApiError(res.status, err.code, `this needs an admin key, and this browser is signed in with a `
      + `${signedInScope()}-scoped key (it can speak, not change the library, presets, takes or projects): Sign out, `
      + "then sign in with an admin key", err.field);
  }
  if (err) return new ApiError(res.status, err.code, err.message, err.field);
  return new ApiError(res.status, "http_error", `${what} failed: HTTP ${res.status}`);
}

async function send(method, url, body) {
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
  const res = await fetchSigned(url, init);
  if (res.ok) return res;
  throw await errorOf(res, `${method} ${url}`);
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

// A form error tied to its field: marked invalid, described by the status line that says why
// (WCAG 3.3.1), and focused. clearInvalid(form) undoes it for every field of `form`.
export function markInvalid(input, statusEl) {
  input.setAttribute("aria-invalid", "true");
  const ids = (input.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
  if (!ids.includes(statusEl.id)) {
    input.setAttribute("aria-describedby", [...ids, statusEl.id].join(" "));
    input.dataset.describedByError = statusEl.id;
  }
  input.focus();
}

export function clearInvalid(root) {
  for (const input of root.querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
    const added = input.dataset.describedByError;
    if (!added) continue;
    const ids = input.getAttribute("aria-describedby").split(" ").filter((id) => id && id !== added);
    if (ids.length) input.setAttribute("aria-describedby", ids.join(" "));
    else input.removeAttribute("aria-describedby");
    delete input.dataset.describedByError;
  }
}

// A control that disables or hides itself while it has the keyboard drops the focus to <body>
// (found by a keyboard trial: Generate, Install). Runs `change`; if the focus was on one of
// `controls` and that one can no longer take it, hands it to the first that can (in order).
export function keepFocus(controls, change) {
  const had = controls.includes(document.activeElement);
  const result = change();
  const usable = (c) => c && c.isConnected && !c.disabled && c.getClientRects().length > 0;
  const active = document.activeElement;
  if (had && !(controls.includes(active) && usable(active))) {
    const next = controls.find(usable);
    if (next) next.focus();
  }
  return result;
}

// A table wider than a narrow screen scrolls sideways in its .table-wrap: that region takes the
// keyboard (arrow keys scroll it) only while it scrolls, so wide screens keep one Tab stop fewer.
function scrollableByKeyboard(wrap) {
  const update = () => {
    if (wrap.scrollWidth > wrap.clientWidth + 1) wrap.tabIndex = 0;
    else wrap.removeAttribute("tabindex");
  };
  const observer = new ResizeObserver(update);
  observer.observe(wrap);
  if (wrap.firstElementChild) observer.observe(wrap.firstElementChild);
}
if (typeof document !== "undefined") {
  document.addEventListener("DOMContentLoaded", () => document.querySelectorAll(".table-wrap").forEach(scrollableByKeyboard));
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
