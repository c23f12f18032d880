-- A take's stalls may be unknown (NULL), as its TTFA may: a take that ended early (its connection
-- lost, its synthesis failed after some audio) has no utterance.done to say how many, and was kept
-- with 0. SQLite cannot drop a NOT NULL in place, so the table is copied (rows and index as they were).
CREATE TABLE takes_new (
    id          TEXT PRIMARY KEY,
    text        TEXT NOT NULL,
    model_id    TEXT NOT NULL,        -- not a foreign key: a take outlives a deleted model
    voice       TEXT NOT NULL,        -- a voice or a preset name, as chosen in the studio
    speed       REAL NOT NULL DEFAULT 1.0,
    sample_rate INTEGER NOT NULL,
    ttfa_ms     REAL,                 -- from utterance.done (or the page's own); NULL if unknown
    stalls      INTEGER,              -- from utterance.done; NULL if unknown
    audio_ms    REAL NOT NULL,        -- measured from the stored audio
    audio_file  TEXT NOT NULL,
    created_at  REAL NOT NULL
);

INSERT INTO takes_new (id, text, model_id, voice, speed, sample_rate, ttfa_ms, stalls, audio_ms, audio_file, created_at)
    SELECT id, text, model_id, voice, speed, sample_rate, ttfa_ms, stalls, audio_ms, audio_file, created_at FROM takes;

DROP TABLE takes;

ALTER TABLE takes_new RENAME TO takes;

CREATE INDEX takes_by_created_at ON takes (created_at);
