-- A Qwen3-TTS model's type (its config.json `tts_model_type`: custom_voice, voice_design, base),
-- read when it is registered, so GET /v1/models still says what the model is (a Base model's voices
-- are the reference voices) once its folder has gone missing or bad. NULL for other families, and
-- for models registered before this migration until a server start reads their folder.
ALTER TABLE models ADD COLUMN model_type TEXT;
