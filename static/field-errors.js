// A server error shown next to the field it names ({"error": {"code", "message", "field"}}),
// in words a user reads: the field's name in the message becomes the field's label.
import { ApiError, say } from "./common.js";

// fields: server field name -> { input, error (the span beside it), label ("The transcript") }.
export class FieldErrors {
  constructor(fields, status) {
    this.fields = fields;
    this.status = status;  // where an error naming no known field goes
  }

  clear() {
    for (const { input, error } of Object.values(this.fields)) {
      input.removeAttribute("aria-invalid");
      error.textContent = "";
    }
  }

  // Shows `err` by its field (and focuses that field); returns the words shown.
  show(err, prefix = "") {
    const slot = err instanceof ApiError && err.field ? this.fields[err.field] : null;
    const words = slot ? plainWords(err, slot.label) : (err && err.message) || String(err);
    if (!slot) {
      say(this.status, prefix ? `${prefix}: ${words}` : words, "error");
      return words;
    }
    say(this.status, prefix ? `${prefix}: see the ${slot.label.replace(/^The /, "").toLowerCase()}.` : "", "error");
    slot.error.textContent = words;
    slot.input.setAttribute("aria-invalid", "true");
    slot.input.focus();
    return words;
  }
}

// "transcript is empty" -> "The transcript is empty."; a few codes get a sentence of their own.
function plainWords(err, label) {
  if (err.status === 409) return `${label} is taken: ${err.message}. Choose another.`;
  if (err.status === 413) return `${label} is too large: ${err.message}.`;
  let text = err.message;
  const field = err.field.split(".").pop();
  if (text.toLowerCase().startsWith(field.toLowerCase() + " ")) text = `${label}${text.slice(field.length)}`;
  else text = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?)]$/.test(text) ? text : `${text}.`;
}
