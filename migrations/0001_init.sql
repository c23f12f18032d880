-- Installed models, their built-in voices, and speaker presets.
CREATE TABLE models (
    id          TEXT PRIMARY KEY,
    family      TEXT NOT NULL,
    name        TEXT NOT NULL,
    path        TEXT,                 -- NULL: shipped inside a package (embedded voice)
    options     TEXT NOT NULL DEFAULT '{}',   -- JSON object of family options
    size_bytes  INTEGER NOT NULL DEFAULT 0,
    source      TEXT NOT NULL DEFAULT 'local', -- embedded | local | config | catalog
    created_at  REAL NOT NULL,
    last_used   REAL
);

CREATE TABLE voices (
    model_id    TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    position    INTEGER NOT NULL DEFAULT 0,   -- 0 = the model's default voice
    PRIMARY KEY (model_id, name)
);

CREATE TABLE presets (
    name        TEXT PRIMARY KEY,
    model_id    TEXT NOT NULL,        -- not a foreign key: a preset outlives a deleted model
    voice       TEXT NOT NULL,
    speed       REAL NOT NULL DEFAULT 1.0,
    settings    TEXT NOT NULL DEFAULT '{}',   -- JSON: other per-family options
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
