#!/usr/bin/env bash
# Runs the test suite of a build directory (default: build/), building it first
# if needed. The default-model tests run when the model is cached
# (scripts/fetch-model.sh) and are skipped otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
scripts/install-deps.sh  # idempotent; a dependency added since the build (nginx) arrives too
if [[ ! -f "$dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$dir" -j"$(nproc)"
# The server tests' Python packages (the openai client, pytest), hash-pinned, in a venv of the build.
req=tests/server/requirements.txt
if ! cmp -s "$req" "$dir/pyenv/requirements.txt"; then
  rm -rf "$dir/pyenv"
  python3 -m venv "$dir/pyenv"
  "$dir/pyenv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$req"
  cp "$req" "$dir/pyenv/requirements.txt"
fi
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
