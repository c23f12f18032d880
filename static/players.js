// One player at a time: a take started while another played left both playing over each other
// (found by a new-user trial, on a project's takes). Any <audio> (or <video>) that starts on the page
// pauses every other one, and tells the page's own players (the studio's live take) to stop.
const stoppers = new Set();

// Pause every media element of the page that plays, but `except`.
export function pauseMedia(except = null) {
  for (const media of document.querySelectorAll("audio, video")) {
    if (media !== except && !media.paused) media.pause();
  }
}

// `stop` is called when a media element of the page starts playing.
export function onMediaPlay(stop) {
  stoppers.add(stop);
}

// (`play` does not bubble: caught on its way down.)
document.addEventListener("play", (event) => {
  pauseMedia(event.target);
  for (const stop of stoppers) stop(event.target);
}, true);
