#!/usr/bin/env bash
# One step from a fresh clone to a runnable lowrank: install dependencies,
# build (Release) into build/, fetch the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
scripts/fetch-model.sh >/dev/null
echo "bootstrap: ready: build/lowrank" >&2
