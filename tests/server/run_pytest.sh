#!/usr/bin/env bash
# Runs the server's end-to-end tests (tests/server/test_*.py) against
# BUILD/lowrank with BUILD/pyenv's Python, which scripts/test.sh installs
# from tests/server/requirements.txt (hash-pinned).
set -euo pipefail
build=$(cd "${1:?usage: run_pytest.sh BUILD_DIR [pytest args]}" && pwd)
shift
py=$build/pyenv/bin/python
[[ -x $py ]] || { echo "no $py: scripts/test.sh $build installs the server tests' Python packages"; exit 1; }
cd "$(dirname "$0")"
LOWRANK_BIN=$build/lowrank exec "$py" -m pytest -q -p no:cacheprovider "$@" .
