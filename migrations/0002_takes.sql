-- Studio takes: what was spoken, with which settings, how it went, and where its audio is.
-- The audio is a PCM16 mono WAV under <data_dir>/takes/ (audio_file is relative to that
-- folder), so the database stays small and the WAV is served from disk with Range.
CREATE TABLE takes (
    id          TEXT PRIMARY KEY,
    text        TEXT NOT NULL,
    model_id    TEXT NOT NULL,        -- not a foreign key: a take outlives a deleted model
    voice       TEXT NOT NULL,        -- a voice or a preset name, as chosen in the studio
    speed       REAL NOT NULL DEFAULT 1.0,
    sample_rate INTEGER NOT NULL,
    ttfa_ms     REAL,                 -- from utterance.done; NULL if unknown
    stalls      INTEGER NOT NULL DEFAULT 0,
    audio_ms    REAL NOT NULL,        -- measured from the stored audio
    audio_file  TEXT NOT NULL,
    created_at  REAL NOT NULL
);

CREATE INDEX takes_by_created_at ON takes (created_at);
