-- Reference recordings: a named voice to clone (Qwen3-TTS Base models), uploaded once with
-- its transcript and used by name. The audio is a PCM16 mono 24 kHz WAV under
-- <data_dir>/references/ (audio_file is relative to that folder), as takes are, so rows stay
-- small; the file is written and renamed before its row is inserted.
CREATE TABLE reference_voices (
    name        TEXT PRIMARY KEY,
    transcript  TEXT NOT NULL,        -- what the recording says (cloning conditions on it)
    sample_rate INTEGER NOT NULL,     -- of the stored file: 24000
    audio_ms    REAL NOT NULL,
    audio_file  TEXT NOT NULL,
    source_name TEXT,                 -- the uploaded file's name, for people
    created_at  REAL NOT NULL
);
