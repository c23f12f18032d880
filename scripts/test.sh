#!/usr/bin/env bash
# Install Voxgate with its test dependencies into .venv, then run the whole test suite.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch==2.13.0 is the CPU build on our machines; the LM family (Orpheus) tests need it.
python -m pip install -q -e ".[lm,test]" "torch==2.13.0"
python -m pytest "$@"
