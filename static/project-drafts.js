// Words typed in a project's passages and not saved yet (each passage's textarea keeps its saved
// text in data-saved): saved before whatever would speak or change the saved text, and kept, with
// where the keyboard was, across the list's re-renders (each passage a generation finishes).
import { api } from "./common.js";
import { focusedPlace, refocus } from "./project-focus.js";

const boxes = () => [...document.querySelectorAll("#passages li.passage textarea")];
const typed = (t) => t.value !== t.dataset.saved;

// The ids of the passages with words typed and not saved.
export function typedPassages() {
  return boxes().filter(typed).map((t) => t.closest("li.passage").dataset.passage);
}

// Save the typed words of these passages (of project `projectId`), if any; the API's error if refused.
export async function saveTyped(projectId, ...ids) {
  for (const id of ids) {
    const text = document.querySelector(`#passages li.passage[data-passage="${id}"] textarea`);
    if (text && typed(text)) {
      await api("PATCH", `/v1/projects/${projectId}/passages/${id}`, { text: text.value });
    }
  }
}

// Text typed and not yet saved, and where the keyboard was: a re-render must not take them away.
export function keepEdits() {
  const drafts = boxes().filter(typed)
    .map((t) => ({ id: t.closest("li.passage").dataset.passage, saved: t.dataset.saved, value: t.value,
                   start: t.selectionStart, end: t.selectionEnd }));
  return { drafts, focus: focusedPlace() };
}

export function restoreEdits({ drafts, focus }) {
  const itemOf = (id) => [...document.querySelectorAll("#passages li.passage")].find((li) => li.dataset.passage === id);
  for (const draft of drafts) {
    const text = itemOf(draft.id)?.querySelector("textarea");
    if (text && text.dataset.saved === draft.saved) {  // (unless the passage's text changed meanwhile)
      text.value = draft.value;
      text.dispatchEvent(new Event("input"));
    }
  }
  refocus(focus);
}
