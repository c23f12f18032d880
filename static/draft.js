// The Studio's text as a draft in this browser (localStorage): typed text came back as the
// built-in sample after a visit to another page (found by a new-user trial). Restored at load;
// the sample shows only when there is no draft; a box emptied (or left blank) forgets it.
const KEY = "voxgate.studio.draft";

export function restoreDraft(textarea) {
  let draft = null;
  try { draft = localStorage.getItem(KEY); } catch { /* storage off: the sample stays */ }
  if (draft === null) return false;
  const max = Number(textarea.dataset.max) || draft.length;  // (the server's limit may have come down)
  textarea.value = draft.slice(0, max);
  return true;
}

export function keepDraft(textarea) {
  try {
    if (textarea.value.trim()) localStorage.setItem(KEY, textarea.value);
    else localStorage.removeItem(KEY);
  } catch { /* storage off or full: the text stays in the box only */ }
}
