#!/usr/bin/env bash
# Install Voxgate with its test dependencies into .venv-test (apart from the .venv that
# `voxgate serve` runs from), then run the whole test suite.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-test
. .venv-test/bin/activate
python -m pip install -q --upgrade pip
# torch==2.13.0 is the CPU build on our machines; the LM family (Orpheus) tests need it.
python -m pip install -q -e ".[lm,test]" "torch==2.13.0"
# The browser tests (tests/webui) drive Debian's Chromium through Playwright (Playwright's
# own browser download is not used). Installed once, as root, only if it is missing.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python -m pytest "$@"
