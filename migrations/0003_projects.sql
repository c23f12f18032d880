-- Studio projects: a long text as ordered passages, each with takes (generated audio).
-- Audio is PCM16 mono WAV under <data_dir>/projects/<project id>/ (audio_file is relative
-- to that folder); a take's edits keep the files they replaced in `history`, for undo.
CREATE TABLE projects (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    model_id    TEXT NOT NULL,        -- not a foreign key: a project outlives a deleted model
    speaker     TEXT NOT NULL,        -- the default speaker: a voice of model_id or a preset name
    pause_ms    REAL NOT NULL DEFAULT 500,   -- pause at a join unless the passage sets its own
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);

CREATE TABLE passages (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,     -- order in the project, 0-based, kept dense
    text        TEXT NOT NULL,
    speaker     TEXT,                 -- NULL: the project's default speaker
    pause_ms    REAL,                 -- the pause after this passage; NULL: the project's
    chosen_take TEXT,                 -- the take the export uses (project_takes.id)
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);

CREATE INDEX passages_by_project ON passages (project_id, position);

CREATE TABLE project_takes (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    passage_id  TEXT NOT NULL REFERENCES passages(id) ON DELETE CASCADE,
    text        TEXT NOT NULL,        -- the passage text it was generated from
    speaker     TEXT NOT NULL,        -- the speaker it was generated with (voice or preset)
    model_id    TEXT NOT NULL,
    voice       TEXT NOT NULL,        -- the model voice the speaker resolved to
    sample_rate INTEGER NOT NULL,
    audio_ms    REAL NOT NULL,        -- of the current audio_file
    audio_file  TEXT NOT NULL,
    history     TEXT NOT NULL DEFAULT '[]',  -- JSON: earlier audio files, newest last (undo)
    created_at  REAL NOT NULL
);

CREATE INDEX project_takes_by_passage ON project_takes (passage_id, created_at);
