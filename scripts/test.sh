#!/usr/bin/env bash
# Set up, then run the linters, the type checker and the whole test suite.
# This is the command the README gives and the one CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TYPHAPKI_VENV:-.venv}
bash scripts/setup.sh "$VENV"
export PATH="$PWD/$VENV/bin:$PATH"
echo "== ruff"
ruff check typhapki tests bench
ruff format --check typhapki tests bench
echo "== mypy"
mypy
echo "== pytest"
pytest -q -p no:cacheprovider "$@"
