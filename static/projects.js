// Projects: create one (name, model, default speaker, pause) and list them.
import { $, api, say, sayError, el, fillModels, fmtDuration, clearInvalid, markInvalid } from "./common.js";
import { fillSpeakers } from "./project-speakers.js";

const status = $("np-status");

async function loadSpeakers() {
  await fillSpeakers($("np-speaker"), $("np-model").value);
}

// A second Create while the first is on its way (a double click, a slow network) made a second
// project: one at a time (a flag, not a disabled button, which would drop the keyboard).
let creating = false;

async function create(e) {
  e.preventDefault();
  if (creating) return;
  clearInvalid($("new-project"));
  const pause = $("np-pause");
  if (pause.validity.badInput || pause.value.trim() === "") {  // (Number("") is 0: not what was typed)
    say(status, "Could not create the project: the pause must be a number of milliseconds (0 to 10000).", "error");
    markInvalid(pause, status);
    return;
  }
  const body = { name: $("np-name").value.trim(), model: $("np-model").value, speaker: $("np-speaker").value,
                 pause_ms: Number(pause.value) };
  creating = true;
  try {
    const project = await api("POST", "/v1/projects", body);
    location.href = `/projects/${project.id}`;  // (creating stays true: the page goes)
  } catch (err) {
    creating = false;
    sayError(status, err, "Could not create the project");
    const input = { name: "np-name", model: "np-model", speaker: "np-speaker", pause_ms: "np-pause" }[err.field];
    if (input) markInvalid($(input), status);
  }
}

// Delete a project with its passages and takes (DELETE /v1/projects/{id}), once confirmed.
function deleteButton(project) {
  const button = el("button", { type: "button", class: "small danger", text: "Delete",
                                "aria-label": `Delete project ${project.name}` });
  button.addEventListener("click", async () => {
    if (!confirm(`Delete the project “${project.name}” with its passages and takes?`)) return;
    button.disabled = true;
    try {
      await api("DELETE", `/v1/projects/${project.id}`);
      say($("list-status"), `Deleted “${project.name}”.`, "ok");
      await loadProjects();
      $("list-h").focus();  // (the button went with its row: the keyboard fell to <body>)
    } catch (err) {
      button.disabled = false;
      sayError($("list-status"), err, "Could not delete the project");
    }
  });
  return button;
}

async function loadProjects() {
  try {
    const { data } = await api("GET", "/v1/projects");
    $("projects").replaceChildren(...data.map((p) => el("li", { "data-project": p.id },
      el("a", { href: `/projects/${p.id}`, text: p.name }),
      el("span", { class: "muted small",
                   text: ` · ${p.num_passages} passage${p.num_passages === 1 ? "" : "s"} · ${p.model} · ${p.speaker} · changed ${new Date(p.updated_at * 1000).toLocaleString()} ` }),
      deleteButton(p))));
    $("projects-empty").hidden = data.length > 0;
  } catch (err) {
    sayError($("list-status"), err, "Could not load projects");
  }
}

$("new-project").addEventListener("submit", create);
$("np-model").addEventListener("change", () => loadSpeakers().catch((err) => sayError(status, err)));
fillModels($("np-model"), $("np-model").dataset.default).then(loadSpeakers)
  .catch((err) => sayError(status, err, "Could not load models"));
loadProjects();
// A project made, changed or deleted in another tab showed only after a reload: the list is read
// again when the page is seen again.
const seenAgain = () => { if (document.visibilityState === "visible") loadProjects(); };
document.addEventListener("visibilitychange", seenAgain);
window.addEventListener("focus", seenAgain);
window.voxgate = { fmtDuration };
