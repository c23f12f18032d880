-- API keys (gateway/keys.py). Only a SHA-256 of each key is kept: the key itself is shown
-- once, by `voxgate keys create`. `prefix` (the key's first characters) names it in lists
-- and logs. NULL limits mean the server's settings (key_rate_limit, key_max_concurrent).
CREATE TABLE api_keys (
    id              TEXT PRIMARY KEY,       -- key-<hex>, also in the key itself
    name            TEXT NOT NULL,
    prefix          TEXT NOT NULL,
    secret_sha256   TEXT NOT NULL UNIQUE,   -- hex digest of the whole key
    scopes          TEXT NOT NULL,          -- space-separated: speech, admin
    rate_limit      TEXT,                   -- e.g. "600/minute"
    max_concurrent  INTEGER,
    created_at      REAL NOT NULL,
    last_used_at    REAL,
    revoked_at      REAL
);
