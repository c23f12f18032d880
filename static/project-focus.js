// Where the keyboard is in the project's passages and joins, and back there once they are drawn
// again. Every button of a passage, take or join disables itself and redraws them (Choose, Trim
// silence, Undo, −/+ of a pause, Merge...): the keyboard fell to <body>, at the top of the page
// (found by a keyboard trial).

const CONTROLS = "button, select, textarea, input";

// The place of `node` (a control in the passages or the joins), else null.
export function placeOf(node) {
  if (!node || !node.closest || !node.closest("#passages, #joins")) return null;
  return { label: node.getAttribute("aria-label"), tag: node.tagName,
           take: node.closest("[data-take]")?.dataset.take, join: node.closest("[data-join]")?.dataset.join,
           passage: node.closest("[data-passage]")?.dataset.passage,
           start: node.selectionStart, end: node.selectionEnd };
}

// The place of the control that has the keyboard, if it is `button` (or, without one, any).
export function focusedPlace(button = null) {
  const active = document.activeElement;
  return button && active !== button ? null : placeOf(active);
}

const usable = (e) => e && e.isConnected && !e.disabled && !e.hidden && e.getClientRects().length > 0;

// Back to `place` unless the keyboard is somewhere already: the control of the same label in the
// same take, join or passage; one it disabled (a take chosen, no edit left to undo) or took away
// (a take deleted) gives it to the first control that takes it there (a take's first, then the
// passage's); a passage gone, to the Passages heading.
export function refocus(place) {
  if (!place) return;
  const active = document.activeElement;
  if (active && active !== document.body && active.isConnected) return;
  const find = (selector) => (selector ? document.querySelector(selector) : null);
  const take = find(place.take && `#passages [data-take="${place.take}"]`);
  const join = find(place.join && `#joins [data-join="${place.join}"]`);
  const passage = find(place.passage && `#passages li.passage[data-passage="${place.passage}"]`);
  const same = [take, join, passage].filter(Boolean)
    .flatMap((scope) => [...scope.querySelectorAll(place.tag)])
    .find((e) => e.getAttribute("aria-label") === place.label && usable(e));
  const first = (scope) => (scope ? [...scope.querySelectorAll(CONTROLS)].find(usable) : null);
  const target = same || first(take) || first(join)
    || (place.take ? first(passage?.querySelector(".ptakes")) : null) || first(passage) || document.getElementById("generate-h");
  if (!target) return;
  target.focus();
  if (target === same && place.start != null && target.setSelectionRange) target.setSelectionRange(place.start, place.end);
}
