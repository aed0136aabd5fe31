#!/usr/bin/env bash
# Reproduces README's key-cache table: perplexity of the default model on
# ../shared/data/wiki.eval.raw with every key cache type, ctx 2048, the
# first $CHUNKS windows. Each window's first half runs as a prompt (exact
# attention, then the keys are compressed; SVDq fits its sequence basis
# here), the second half is fed one token at a time through the decode path
# and scored against the compressed cache. Prints one line per configuration:
# the command, the perplexity and what the key cache held.
#   scripts/kv_cache_table.sh [OUTDIR] [CHUNKS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/lowrank-kv}
chunks=${2:-8}
bin=${LOWRANK_BIN:-build/lowrank}
mkdir -p "$out"
model=$(scripts/fetch-model.sh)
cal="$out/smollm2-kvcal.gguf"
[ -f "$cal" ] || $bin calibrate-kv -m "$model" --calib ../shared/data/wiki.calib.raw \
  --calib-samples 32 --calib-len 1024 -o "$cal" 2>/dev/null
row() {
  local m=$1; shift
  echo "## $* (model $(basename "$m"))"
  $bin perplexity -m "$m" -f ../shared/data/wiki.eval.raw -c 2048 --chunks "$chunks" --decode \
    --no-progress -t 2 "$@" 2>/dev/null
}
row "$model" --cache-type-k f32
row "$model" --cache-type-k f16
row "$model" --cache-type-k q8_0
row "$model" --cache-type-k q4_0
row "$model" --cache-type-k kivi2
row "$model" --cache-type-k svdq
row "$cal" --cache-type-k svdq --svdq-basis calibrated
row "$model" --cache-type-k svdq --svdq-rank 32
row "$model" --cache-type-k svdq --svdq-energy 1 --svdq-schedule 4,4,2,2,2,1,1,0
row "$cal" --cache-type-k svdq --svdq-basis calibrated --svdq-energy 1 --svdq-schedule 4,4,2,2,2,1,1,0
