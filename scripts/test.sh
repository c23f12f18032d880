#!/usr/bin/env bash
# Install Voxgate with its test dependencies into .venv-test (apart from the .venv that
# `voxgate serve` runs from), then run the whole test suite.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-test
. .venv-test/bin/activate
python -m pip install -q --upgrade pip
# torch==2.13.0 resolves to the CPU build on our CI machines (elsewhere: README.md, install the CPU
# build into .venv-test first); the LM families' tests need it.
python -m pip install -q -e ".[lm,test]" "torch==2.13.0"
# qwen-tts holds the reference Qwen3-TTS modeling code for the parity tests (tests/models/
# qwen_reference.py). Its own requirements (gradio, torchaudio, librosa, onnxruntime, sox, a
# second torch) serve its demo and the 25 Hz tokenizer, not the modules those tests import, so
# it goes in without them; transformers==4.57.3, which it needs, comes with the test extra.
python -m pip install -q --no-deps "qwen-tts==0.1.1"
# The browser tests (tests/webui) drive Debian's Chromium through Playwright (Playwright's
# own browser download is not used). Installed once, as root, only if it is missing.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python -m pytest "$@"
